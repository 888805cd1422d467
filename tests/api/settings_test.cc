// The TERSE_* settings as a whole (terse/common/env.h): every variable read anywhere outside
// tests/ is declared exactly once and read through its declaration, only by the entry points
// (nothing below api/ reads the environment); docs/env.md documents exactly the declared
// ones with the type, default and accepted values the parser enforces; the library's
// declarations are all linked into its registry; and a malformed value of each is rejected at
// start-up with a message naming it.
#include "terse/common/env.h"

#include <terse/communicator.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace terse {
namespace {

namespace fs = std::filesystem;

std::string readFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What the sources outside tests/ declare and read: name -> "dir/file" of each occurrence.
// Reads by name that bypass the declarations (getenv of a TERSE_* name, the test-only by-name
// getters, a setting object that is no declaration's) land in `read` under a name that is
// declared nowhere, and `byName` / `environmentReads` list where the rules of
// terse/common/env.h are broken.
struct SourceScan {
  std::map<std::string, std::vector<std::string>> declared, read;
  std::vector<std::string> byName;            // "file: call" of a by-name getter
  std::vector<std::string> environmentReads;  // "file: call" of a read below api/
};

// The top-level directories that are not code of terse's (build trees, docs, tests and their
// data, helpers' worktrees).
bool skippedDirectory(const std::string& name) {
  return name.rfind("build", 0) == 0 || name == "docs" || name == "tests" || name[0] == '.';
}

// The layers that take their settings as values and read no environment (terse/common/env.h).
bool belowApi(const std::string& where) {
  const std::string dir = where.substr(0, where.find('/'));
  return dir == "collectives" || dir == "transport" || dir == "rendezvous" ||
         dir == "compressors" || dir == "kernels" || dir == "optim";
}

// UCX's own variables (UCX_TLS, UCX_RNDV_THRESH), which ucp_config_read() takes from the
// environment itself: terse looks at them where UCX does, so its choices follow UCX's
// (transport/src/ucx_core.cc says why). No TERSE_* variable is read there.
bool ucxOwnVariables(const std::string& where) { return where == "transport/src/ucx_core.cc"; }

const SourceScan& scanSources() {
  static const SourceScan scan = [] {
    SourceScan out;
    // A declaration is the start of an EnvVarInfo: the name and one of the five types; the
    // constant's identifier where it has one (const EnvSetting kStoreSetting{{"TERSE_STORE", ...).
    const std::regex declaration(
        R"re(\{\s*"(TERSE_[A-Z0-9_]+)"\s*,\s*"(int|bool|string|enum|list)")re");
    const std::regex named(R"re(\b(k[A-Za-z0-9_]+)\s*\{\s*\{\s*"(TERSE_[A-Z0-9_]+)")re");
    // A read: a declaration's typed getter, C/C++ getenv of a TERSE_* name, Python's os.environ
    // / os.getenv.
    const std::regex typedRead(
        R"re(\b([A-Za-z0-9_]+)\s*(\.|->)\s*read(Int|Bool|Enum|Text|Raw)\s*\(\s*\))re");
    const std::regex cxxRead(R"re(\bgetenv\s*\(\s*"(TERSE_[A-Z0-9_]+)")re");
    const std::regex byName(
        R"re(\b(envInt|envBool|envEnum|envString|envRaw|findEnvSetting)\s*\(|env_by_name\.h)re");
    const std::regex anyRead(
        R"re(\b(getenv|secure_getenv|fromEnvironment|checkEnvironment)\s*\(|\.read(Int|Bool|Enum|Text|Raw)\s*\()re");
    const std::regex pyRead(
        R"re(\bos\.(environ\.get\s*\(|environ\s*\[|getenv\s*\()\s*["'](TERSE_[A-Z0-9_]+))re");
    const fs::path root(TERSE_SOURCE_DIR);
    std::map<std::string, std::string> nameOf;                    // identifier -> TERSE_* name
    std::vector<std::pair<std::string, std::string>> typedReads;  // (identifier, file)
    for (const auto& top : fs::directory_iterator(root)) {
      if (!top.is_directory() || skippedDirectory(top.path().filename().string())) continue;
      for (const auto& entry : fs::recursive_directory_iterator(top.path())) {
        if (!entry.is_regular_file()) continue;
        const std::string ext = entry.path().extension().string();
        const bool cxx = ext == ".cc" || ext == ".h" || ext == ".cu" || ext == ".c";
        if (!cxx && ext != ".py") continue;
        const std::string text = readFile(entry.path());
        const std::string where = fs::relative(entry.path(), root).string();
        if (cxx) {
          for (std::sregex_iterator it(text.begin(), text.end(), declaration), end; it != end; ++it)
            out.declared[(*it)[1]].push_back(where);
          for (std::sregex_iterator it(text.begin(), text.end(), named), end; it != end; ++it)
            nameOf[(*it)[1]] = (*it)[2];
          for (std::sregex_iterator it(text.begin(), text.end(), typedRead), end; it != end; ++it)
            typedReads.emplace_back((*it)[1], where);
          for (std::sregex_iterator it(text.begin(), text.end(), cxxRead), end; it != end; ++it) {
            out.read[(*it)[1]].push_back(where);
            out.byName.push_back(where + ": " + it->str());
          }
          const bool parser =
              where == "common/src/env.cc" || where == "common/include/terse/common/env_by_name.h";
          if (!parser)
            for (std::sregex_iterator it(text.begin(), text.end(), byName), end; it != end; ++it)
              out.byName.push_back(where + ": " + it->str());
          if (belowApi(where) && !ucxOwnVariables(where))
            for (std::sregex_iterator it(text.begin(), text.end(), anyRead), end; it != end; ++it)
              out.environmentReads.push_back(where + ": " + it->str());
        } else {
          for (std::sregex_iterator it(text.begin(), text.end(), pyRead), end; it != end; ++it)
            out.read[(*it)[2]].push_back(where);
        }
      }
    }
    for (const auto& [identifier, where] : typedReads) {
      auto it = nameOf.find(identifier);
      out.read[it != nameOf.end() ? it->second : "(no declaration named " + identifier + ")"]
          .push_back(where);
    }
    return out;
  }();
  return scan;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

TEST(Settings, SourceScanFindsTheKnownDeclarationsAndReads) {
  // Guards the scan itself: a regex that matched nothing would pass every test below.
  const SourceScan& scan = scanSources();
  EXPECT_EQ(scan.declared.count("TERSE_SEGMENT_BYTES"), 1u);
  EXPECT_EQ(scan.declared.count("TERSE_FAULT"), 1u);
  EXPECT_EQ(scan.read.count("TERSE_LIBRARY"), 1u) << "the Python package's read";
  EXPECT_EQ(scan.read.count("TERSE_TIMEOUT_MS"), 1u) << "a typed read (readInt())";
  EXPECT_EQ(scan.read.count("TERSE_FAULT"), 1u) << "a typed read (readText())";
  EXPECT_GE(scan.declared.size(), 20u);
}

// Settings are read through their declarations, never by their names (the by-name getters of
// terse/common/env_by_name.h are for tests), and only by the entry points: nothing below api/
// reads the environment (terse/common/env.h).
TEST(Settings, ReadsGoThroughDeclarationsAndOnlyAtTheEntryPoints) {
  const SourceScan& scan = scanSources();
  EXPECT_TRUE(scan.byName.empty()) << "read by name: " << joined(scan.byName);
  EXPECT_TRUE(scan.environmentReads.empty())
      << "read below api/ (take the value as an argument instead): "
      << joined(scan.environmentReads);
}

TEST(Settings, EveryVariableReadIsDeclaredExactlyOnce) {
  const SourceScan& scan = scanSources();
  for (const auto& [name, files] : scan.declared)
    EXPECT_EQ(files.size(), 1u) << name << " is declared in " << joined(files);
  for (const auto& [name, files] : scan.read)
    EXPECT_EQ(scan.declared.count(name), 1u)
        << name << " is read in " << joined(files) << " but declared nowhere";
}

// Every backquoted TERSE_ name of `relPath`, and the check that the doc names each declared
// variable starting with `prefix`.
std::set<std::string> expectDocumented(const std::string& relPath, const std::string& prefix) {
  const std::string doc = readFile(fs::path(TERSE_SOURCE_DIR) / relPath);
  EXPECT_FALSE(doc.empty()) << relPath << " is missing";
  std::set<std::string> named;
  for (size_t pos = 0; (pos = doc.find("`TERSE_", pos)) != std::string::npos;) {
    size_t end = doc.find('`', pos + 1);
    named.insert(doc.substr(pos + 1, end - pos - 1));
    pos = end + 1;
  }
  for (const auto& [name, files] : scanSources().declared) {
    if (name.rfind(prefix, 0) == 0) {
      EXPECT_EQ(named.count(name), 1u)
          << name << " is declared (" << joined(files) << ") but not documented in " << relPath;
    }
  }
  return named;
}

TEST(Settings, DocumentationListsExactlyTheDeclaredVariables) {
  for (const std::string& name : expectDocumented("docs/env.md", "TERSE_"))
    EXPECT_EQ(scanSources().declared.count(name), 1u)
        << name << " is in docs/env.md but declared nowhere";
}

// What the scripts read (scripts/, .ci/run) that the library does not declare is theirs: each
// is listed in docs/env.md's "Scripts' variables" table, so no knob of the build, test or
// benchmark drivers is undocumented.
TEST(Settings, ScriptVariablesAreDocumented) {
  const fs::path root(TERSE_SOURCE_DIR);
  const std::string doc = readFile(root / "docs/env.md");
  const size_t section = doc.find("## Scripts' variables");
  ASSERT_NE(section, std::string::npos) << "docs/env.md has no \"Scripts' variables\" section";
  const std::string table = doc.substr(section);
  const std::regex read(R"(\$\{?(TERSE_[A-Z0-9_]+))");
  std::map<std::string, std::string> scripts;  // variable -> a script that reads it
  std::vector<fs::path> files = {root / ".ci/run"};
  for (const auto& e : fs::recursive_directory_iterator(root / "scripts"))
    if (e.is_regular_file() && e.path().extension() == ".sh") files.push_back(e.path());
  for (const fs::path& f : files) {
    const std::string text = readFile(f);
    for (std::sregex_iterator it(text.begin(), text.end(), read), end; it != end; ++it)
      scripts.emplace((*it)[1], fs::relative(f, root).string());
  }
  EXPECT_GE(scripts.size(), 10u) << "the scan found too few reads to be working";
  for (const auto& [name, where] : scripts) {
    if (scanSources().declared.count(name)) continue;  // a library setting the script passes on
    const std::regex word("(^|[^A-Z0-9_])" + name + "([^A-Z0-9_]|$)");
    EXPECT_TRUE(std::regex_search(table, word))
        << name << " is read by " << where << " but not in docs/env.md's scripts table";
  }
}

// The plugin's users find all its knobs in docs/nccl-plugin.md.
TEST(Settings, NcclPluginDocListsEveryPluginVariable) {
  expectDocumented("docs/nccl-plugin.md", "TERSE_NET_");
  expectDocumented("docs/nccl-plugin.md", "TERSE_COLLNET_");
}

// The declarations of the library's own directories are all in this program's registry (the
// test links the library as applications do, and the plugin's settings files), so
// checkEnvironment() sees each one.
TEST(Settings, TheLibrarysDeclarationsAreAllRegistered) {
  // What an application that creates a communicator links (its settings' files come with it).
  volatile auto create = &Communicator::createFromEnv;
  ASSERT_NE(create, nullptr);
  std::set<std::string> registered;
  for (const EnvVarInfo& v : envRegistry()) registered.insert(v.name);
  EXPECT_TRUE(envConflicts().empty()) << joined(envConflicts());
  for (const auto& [name, files] : scanSources().declared) {
    const std::string dir = files[0].substr(0, files[0].find('/'));
    // Tools and examples (terse-train): not linked here.
    if (dir == "bench" || dir == "fuzz" || dir == "sim" || dir == "examples") continue;
    EXPECT_EQ(registered.count(name), 1u) << name << " (" << files[0] << ") is not registered";
  }
}

// docs/env.md's row of each variable gives its type and exactly the range or choices the
// parser accepts (envAccepted), so the doc cannot promise a range the code does not enforce.
TEST(Settings, DocumentationGivesEachVariablesTypeAndAcceptedValues) {
  const std::string doc = readFile(fs::path(TERSE_SOURCE_DIR) / "docs/env.md");
  for (const auto& v : envRegistry()) {
    const std::string head = std::string("| `") + v.name + "` | ";
    size_t row = doc.find(head);
    ASSERT_NE(row, std::string::npos) << v.name;
    std::string line = doc.substr(row, doc.find('\n', row) - row);
    std::string want = head + v.type + " | " + v.defaultValue + " | " + envAccepted(v) + " |";
    // An empty cell is written "| |".
    for (std::string twice = "|  |"; want.find(twice) != std::string::npos;)
      want.replace(want.find(twice), twice.size(), "| |");
    EXPECT_EQ(line.substr(0, want.size()), want) << v.name;
    // The next cell, "every rank": "agreed" exactly for the settings every communicator
    // compares across its ranks (EnvAgreement::kEveryRank).
    if (line.compare(0, want.size(), want) != 0) continue;
    const std::string rest = line.substr(want.size());  // " agreed | meaning |" or " | ..."
    const size_t bar = rest.find('|');
    ASSERT_NE(bar, std::string::npos) << v.name << " has no \"every rank\" column";
    std::string cell = rest.substr(0, bar);
    cell.erase(0, cell.find_first_not_of(' '));
    cell.erase(cell.find_last_not_of(' ') + 1);
    if (v.everyRank)
      EXPECT_EQ(cell, "agreed") << v.name << " is compared across ranks: mark its row";
    else
      EXPECT_EQ(cell.find("agreed"), std::string::npos)
          << v.name << " is not compared across ranks, but its row says " << cell;
  }
}

// Issue 44, finding 6: the settings that change the messages ranks exchange or the arithmetic
// they must do alike are compared across ranks when a communicator is made. Each of the others
// may differ between ranks: the log, the timeout, threads of the codec kernels (block-aligned
// pieces, the same bytes), the node and bootstrap variables (per rank by nature; the world size
// and store are checked by the rendezvous), TERSE_PIPELINE_DEPTH (the same messages, posted in
// another order: SettingsProcesses.PipelineDepthMayDiffer), the UCX eager switch (a protocol
// choice UCX makes per sender), fault rules, and the plugin's, checked where it connects.
TEST(Settings, TheSettingsEveryRankMustShareAreMarked) {
  std::set<std::string> marked;
  for (const EnvVarInfo& v : envRegistry())
    if (v.everyRank) marked.insert(v.name);
  EXPECT_EQ(marked, (std::set<std::string>{"TERSE_AGREEMENT_DIRECT_RANKS", "TERSE_ALGO",
                                           "TERSE_SEGMENT_BYTES", "TERSE_SMALL_BYTES",
                                           "TERSE_TWOLEVEL_SEGMENT_BYTES"}));
}

// The comparison itself (AgreedSettings::compare), which every rank runs over the same texts.
TEST(Settings, AgreedSettingsNameTheSettingAndTheRanksThatDiffer) {
  const std::string defaults =
      "TERSE_SEGMENT_BYTES=1048576 (default)\n"
      "TERSE_TWOLEVEL_SEGMENT_BYTES=16777216 (default)\n";
  // A value set to the default agrees with an unset one.
  EXPECT_TRUE(AgreedSettings::compare({defaults,
                                       "TERSE_SEGMENT_BYTES=1048576\n"
                                       "TERSE_TWOLEVEL_SEGMENT_BYTES=16777216\n"})
                  .isOk());
  const std::string small =
      "TERSE_SEGMENT_BYTES=1048576 (default)\n"
      "TERSE_TWOLEVEL_SEGMENT_BYTES=262144\n";
  Status s = AgreedSettings::compare({defaults, defaults, small, small});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("TERSE_TWOLEVEL_SEGMENT_BYTES differs between ranks: rank 0 has "
                             "16777216 (default), rank 2 has 262144 (2 ranks in all differ"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("TERSE_SEGMENT_BYTES differs"), std::string::npos) << s.message();
  // Two settings: both named. Rank 0 is the one that set something.
  s = AgreedSettings::compare(
      {"TERSE_SEGMENT_BYTES=262144\nTERSE_TWOLEVEL_SEGMENT_BYTES=262144\n", defaults});
  EXPECT_NE(s.message().find("TERSE_SEGMENT_BYTES differs between ranks: rank 0 has 262144, rank "
                             "1 has 1048576 (default); TERSE_TWOLEVEL_SEGMENT_BYTES differs"),
            std::string::npos)
      << s.message();
  // Another build's list, or bytes that are not a list, are refused with the rank's name.
  s = AgreedSettings::compare({defaults, "TERSE_SEGMENT_BYTES=1048576\n"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  s = AgreedSettings::compare({defaults, std::string("\x01\x02garbage", 9)});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
}

// What a communicator reads: every marked setting, canonical text, and whether it was set.
TEST(Settings, AgreedSettingsReadEachMarkedSettingOnce) {
  setenv("TERSE_ALGO", "FLAT", 1);
  setenv("TERSE_SEGMENT_BYTES", "262144", 1);
  auto read = AgreedSettings::fromEnvironment();
  unsetenv("TERSE_ALGO");
  unsetenv("TERSE_SEGMENT_BYTES");
  ASSERT_TRUE(read.isOk()) << read.status().toString();
  const std::string text = read->encode();
  EXPECT_NE(text.find("TERSE_ALGO=flat\n"), std::string::npos) << text;
  EXPECT_NE(text.find("TERSE_SEGMENT_BYTES=262144\n"), std::string::npos) << text;
  EXPECT_NE(text.find("TERSE_SMALL_BYTES=65536 (default)\n"), std::string::npos) << text;
  setenv("TERSE_SMALL_BYTES", "-1", 1);
  auto bad = AgreedSettings::fromEnvironment();
  unsetenv("TERSE_SMALL_BYTES");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// A malformed value of every registered variable fails checkEnvironment() (which communicators
// run at creation) with kInvalidArgument naming the variable. Free-form strings without a
// syntax of their own are listed with the reason every text is acceptable.
TEST(Settings, AMalformedValueOfEachIsRejectedNamingIt) {
  const std::map<std::string, std::string> badStrings = {
      {"TERSE_FAULT", "explode:rank=1"},
      {"TERSE_COLLNET_CODEC", "int8:block=3"},
      {"TERSE_COLLNET_EF_PERIOD", "sometimes"},
  };
  const std::map<std::string, std::string> anyText = {
      {"TERSE_NODE", "a node's name is any text"},
      {"TERSE_STORE", "host:port, or else the path of a directory"},
      {"TERSE_LIBRARY", "a path, which the Python package tries to load"},
      {"TERSE_NET_IFNAME", "an interface name, looked up when the plugin starts"},
  };
  ASSERT_TRUE(checkEnvironment().isOk()) << checkEnvironment().message();
  for (const EnvVarInfo& v : envRegistry()) {
    const std::string type = v.type;
    std::string bad;
    if (type == "int") bad = "12x";
    if (type == "bool") bad = "maybe";
    if (type == "enum" || type == "list") bad = "no-such-choice";
    if (type == "string") {
      if (anyText.count(v.name)) {
        EXPECT_EQ(v.check, nullptr) << v.name << " has a parser: give it a malformed example";
        continue;
      }
      ASSERT_EQ(badStrings.count(v.name), 1u)
          << v.name << ": a string setting needs a parser (EnvVarInfo::check) and a malformed "
          << "example here, or an entry in anyText saying why every text is valid";
      bad = badStrings.at(v.name);
    }
    setenv(v.name, bad.c_str(), 1);
    Status s = checkEnvironment();
    unsetenv(v.name);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << v.name << "=" << bad;
    EXPECT_NE(s.message().find(v.name), std::string::npos)
        << v.name << "=" << bad << ": " << s.message();
  }
}

}  // namespace
}  // namespace terse
