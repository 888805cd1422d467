#include "terse/rendezvous/store.h"

#include "terse/common/logging.h"

#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace terse {

namespace {

// Polling back-off: quick at first (ranks usually arrive together), then gentle on the store.
class Backoff {
 public:
  void sleep() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::milliseconds(32));
  }

 private:
  std::chrono::milliseconds delay_{1};
};

}  // namespace

Result<std::string> Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Backoff backoff;
  for (;;) {
    TERSE_ASSIGN_OR_RETURN(std::optional<std::string> value, tryGet(key));
    if (value) return std::move(*value);
    if (std::chrono::steady_clock::now() >= deadline)
      return errorTimeout("key '%s' did not appear in the %s store within %lld ms", key.c_str(),
                          describe().c_str(), static_cast<long long>(timeout.count()));
    backoff.sleep();
  }
}

Status Store::waitAll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                      std::string (*describeMissing)(const std::vector<size_t>&)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> seen(keys.size(), false);
  size_t remaining = keys.size();
  Backoff backoff;
  for (;;) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (seen[i]) continue;
      TERSE_ASSIGN_OR_RETURN(std::optional<std::string> value, tryGet(keys[i]));
      if (value) {
        seen[i] = true;
        --remaining;
      }
    }
    if (remaining == 0) return Status::ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      std::vector<size_t> missing;
      for (size_t i = 0; i < keys.size(); ++i)
        if (!seen[i]) missing.push_back(i);
      std::string what;
      if (describeMissing) {
        what = describeMissing(missing);
      } else {
        for (size_t i : missing) what += (what.empty() ? "'" : ", '") + keys[i] + "'";
        what = "keys " + what;
      }
      return errorTimeout("%s missing from the %s store after %lld ms", what.c_str(),
                          describe().c_str(), static_cast<long long>(timeout.count()));
    }
    backoff.sleep();
  }
}

// ---- memory ----

namespace {

class MemoryStore final : public Store {
 public:
  Status set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    map_[key] = value;
    return Status::ok();
  }
  Result<std::optional<std::string>> tryGet(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  Result<std::optional<std::string>> setIfAbsent(const std::string& key,
                                                 const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto placed = map_.emplace(key, value);
    if (placed.second) return std::optional<std::string>();
    return std::optional<std::string>(placed.first->second);
  }
  std::string describe() const override { return "memory"; }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> map_;
};

// ---- file ----

// Keys become file names: anything outside [A-Za-z0-9._-] is escaped as %XX, so keys with '/'
// stay inside the directory.
std::string escapeKey(const std::string& key) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (out.empty() || out[0] == '.') out.insert(0, "%");
  return out;
}

class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}

  Status set(const std::string& key, const std::string& value) override {
    return write(key, value, nullptr);
  }

  Result<std::optional<std::string>> setIfAbsent(const std::string& key,
                                                 const std::string& value) override {
    bool existed = false;
    TERSE_RETURN_IF_ERROR(write(key, value, &existed));
    if (!existed) return std::optional<std::string>();
    TERSE_ASSIGN_OR_RETURN(std::optional<std::string> there, tryGet(key));
    return std::optional<std::string>(there.value_or(std::string()));
  }

  Result<std::optional<std::string>> tryGet(const std::string& key) override {
    std::string path = dir_ + "/" + escapeKey(key);
    std::ifstream in(path, std::ios::binary);
    if (!in.good()) {
      if (errno == ENOENT || errno == 0) return std::optional<std::string>();
      return errorSystem("file store: cannot read %s: %s", path.c_str(), std::strerror(errno));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    return std::optional<std::string>(ss.str());
  }

  std::string describe() const override { return "file(" + dir_ + ")"; }

 private:
  // Writes the value to a temporary file, then puts it in place atomically: rename (replace)
  // for a set, link (fails when the key exists: *existed) for a set-if-absent.
  Status write(const std::string& key, const std::string& value, bool* existed) {
    std::string final = dir_ + "/" + escapeKey(key);
    std::string tmp = final + ".tmp." + std::to_string(getpid()) + "." +
                      std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      return errorSystem("file store: cannot create %s: %s", tmp.c_str(), std::strerror(errno));
    size_t done = 0;
    while (done < value.size()) {
      ssize_t n = ::write(fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return errorSystem("file store: writing %s failed: %s", tmp.c_str(), std::strerror(e));
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    // rename and link are atomic: readers see the whole value or no key.
    if (existed != nullptr) {
      int rc = ::link(tmp.c_str(), final.c_str());
      int e = errno;
      ::unlink(tmp.c_str());
      *existed = rc != 0 && e == EEXIST;
      if (rc != 0 && !*existed)
        return errorSystem("file store: linking %s failed: %s", final.c_str(), std::strerror(e));
      return Status::ok();
    }
    if (::rename(tmp.c_str(), final.c_str()) != 0) {
      int e = errno;
      ::unlink(tmp.c_str());
      return errorSystem("file store: renaming to %s failed: %s", final.c_str(), std::strerror(e));
    }
    return Status::ok();
  }

  std::string dir_;
};

}  // namespace

std::shared_ptr<Store> createMemoryStore() { return std::make_shared<MemoryStore>(); }

Result<std::unique_ptr<Store>> createFileStore(const std::string& directory) {
  if (directory.empty()) return errorInvalidArgument("file store: empty directory path");
  if (::mkdir(directory.c_str(), 0755) != 0 && errno != EEXIST)
    return errorSystem("file store: cannot create directory %s: %s", directory.c_str(),
                       std::strerror(errno));
  struct stat st;
  if (::stat(directory.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return errorInvalidArgument("file store: %s is not a directory", directory.c_str());
  return std::unique_ptr<Store>(new FileStore(directory));
}

}  // namespace terse
