// The UCX core (transport/ucx_core.h) against the real UCX: configuration tweaks (applied, refused,
// left to the user), and the PEER -> NONE endpoint fallback that both the transport and the net
// plugin rely on when UCX_TLS allows shared memory only.
#include "terse/transport/ucx_core.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace terse {
namespace {

// Sets an environment variable for one test and restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

void onError(void*, ucp_ep_h, ucs_status_t) {}

// Connects a fresh worker to another under `tls`, asking for PEER mode; returns what UCX said and
// whether PEER mode survived.
void connectUnder(const char* tls, ucs_status_t* status, bool* peerMode) {
  ScopedEnv env("UCX_TLS", tls);
  UcxWorker a, b;
  ASSERT_TRUE(ucxOpenWorker(UcxWorkerOptions{}, &a).isOk());
  ASSERT_TRUE(ucxOpenWorker(UcxWorkerOptions{}, &b).isOk());
  EXPECT_FALSE(a.address.empty());
  *peerMode = true;
  ucp_ep_h ep = nullptr;
  *status = ucxCreateEndpoint(a.worker, b.address, peerMode, &onError, nullptr, &ep);
  if (ep != nullptr) {
    ucs_status_ptr_t sp = ucxCloseEndpoint(ep, /*force=*/true);
    if (sp != nullptr) {
      EXPECT_TRUE(
          ucxWaitRequest(a.worker, sp, std::chrono::steady_clock::now() + std::chrono::seconds(5)));
      ucp_request_free(sp);
    }
  }
  ucxCloseWorker(&a);
  ucxCloseWorker(&b);
  EXPECT_EQ(a.worker, nullptr);
  EXPECT_EQ(a.context, nullptr);
}

TEST(UcxCore, SharedMemoryOnlyFallsBackToNoPeerMode) {
  ucs_status_t status = UCS_ERR_LAST;
  bool peerMode = true;
  connectUnder("posix,sysv,cma,self", &status, &peerMode);
  EXPECT_EQ(status, UCS_OK) << ucs_status_string(status);
  EXPECT_FALSE(peerMode) << "UCX 1.13 cannot report a peer's failure over shared memory";
}

TEST(UcxCore, TcpKeepsPeerMode) {
  ScopedEnv devices("UCX_NET_DEVICES", "lo");
  ucs_status_t status = UCS_ERR_LAST;
  bool peerMode = true;
  connectUnder("tcp", &status, &peerMode);
  EXPECT_EQ(status, UCS_OK) << ucs_status_string(status);
  EXPECT_TRUE(peerMode);
}

TEST(UcxCore, ConfigTweaks) {
  ScopedEnv thresh("UCX_RNDV_THRESH", nullptr);
  UcxWorker w;
  // A required tweak UCX refuses fails the worker, naming the variable and the caller's hint.
  UcxWorkerOptions bad;
  bad.tweaks.push_back(UcxConfigTweak{"RNDV_THRESH", "not-a-size", true, "the hint"});
  Status st = ucxOpenWorker(bad, &w);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("RNDV_THRESH"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("the hint"), std::string::npos) << st.message();
  EXPECT_EQ(w.worker, nullptr);
  // An optional one is a note, and the worker opens with UCX's default.
  bad.tweaks[0].required = false;
  ASSERT_TRUE(ucxOpenWorker(bad, &w).isOk());
  ASSERT_EQ(w.notes.size(), 1u);
  EXPECT_NE(w.notes[0].find("RNDV_THRESH"), std::string::npos) << w.notes[0];
  ucxCloseWorker(&w);
  // A good one applies silently.
  UcxWorkerOptions good;
  good.tweaks.push_back(UcxConfigTweak{"RNDV_THRESH", "inf", true, ""});
  ASSERT_TRUE(ucxOpenWorker(good, &w).isOk());
  EXPECT_TRUE(w.notes.empty());
  ucxCloseWorker(&w);
  // The user's variable wins: the tweak is not even tried (so the bad value is not refused).
  ScopedEnv user("UCX_RNDV_THRESH", "8k");
  bad.tweaks[0].required = true;
  EXPECT_TRUE(ucxUserSet("RNDV_THRESH"));
  ASSERT_TRUE(ucxOpenWorker(bad, &w).isOk());
  EXPECT_TRUE(w.notes.empty());
  ucxCloseWorker(&w);
}

}  // namespace
}  // namespace terse
