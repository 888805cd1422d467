#include "terse/rendezvous/bootstrap.h"
#include "terse/rendezvous/store.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace terse {
namespace {

using std::chrono::milliseconds;

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Clears every variable the bootstrap reads so each test states its own environment.
class EnvGuard {
 public:
  EnvGuard() { clear(); }
  ~EnvGuard() { clear(); }
  static void clear() {
    for (const std::string& v : bootstrapVariableNames()) unsetenv(v.c_str());
  }
};

// What a communicator does when it is made from the environment (api/src/settings.cc): the
// variables the bootstrap consults, read here, and handed to it.
Result<BootstrapInfo> readBootstrapEnv() {
  BootstrapVariables vars;
  for (const std::string& name : bootstrapVariableNames()) {
    const char* value = std::getenv(name.c_str());
    if (value != nullptr && *value != '\0') vars.values[name] = value;
  }
  return bootstrapInfoFrom(vars);
}

// The bootstrap reads nothing itself: what it is given decides, whatever the environment says.
TEST(Bootstrap, UsesOnlyTheVariablesItIsGiven) {
  EnvGuard guard;
  setenv("TERSE_RANK", "1", 1);
  setenv("TERSE_WORLD_SIZE", "2", 1);
  setenv("TERSE_STORE", "/tmp/from-the-environment", 1);
  BootstrapVariables vars;
  vars.values = {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"TERSE_STORE", "h:99"}};
  auto info = bootstrapInfoFrom(vars);
  ASSERT_TRUE(info.isOk()) << info.status().toString();
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->rankSource, "SLURM_PROCID");
  EXPECT_EQ(info->store, "h:99");
  auto alone = bootstrapInfoFrom(BootstrapVariables());
  ASSERT_TRUE(alone.isOk()) << alone.status().toString();
  EXPECT_EQ(alone->size, 1) << "nothing given: a world of one";
}

TEST(Bootstrap, ParseHostPort) {
  std::string host;
  int port = 0;
  EXPECT_TRUE(parseHostPort("127.0.0.1:29500", &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 29500);
  EXPECT_TRUE(parseHostPort("node-7:80", &host, &port));
  EXPECT_EQ(host, "node-7");
  EXPECT_FALSE(parseHostPort("/tmp/store", &host, &port));
  EXPECT_FALSE(parseHostPort("./store:1", &host, &port));
  EXPECT_FALSE(parseHostPort("host:", &host, &port));
  EXPECT_FALSE(parseHostPort(":80", &host, &port));
  EXPECT_FALSE(parseHostPort("host:80x", &host, &port));
  EXPECT_FALSE(parseHostPort("store", &host, &port));
}

TEST(Bootstrap, TerseVariablesWin) {
  EnvGuard guard;
  setenv("TERSE_RANK", "2", 1);
  setenv("TERSE_WORLD_SIZE", "4", 1);
  setenv("TERSE_LOCAL_RANK", "0", 1);
  setenv("TERSE_STORE", "h:1234", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  auto info = readBootstrapEnv();
  ASSERT_TRUE(info.isOk()) << info.status().toString();
  EXPECT_EQ(info->rank, 2);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->localRank, 0);
  EXPECT_EQ(info->store, "h:1234");
  EXPECT_EQ(info->rankSource, "TERSE_RANK");
}

TEST(Bootstrap, LauncherFallbacks) {
  {
    EnvGuard guard;  // mpirun (OpenMPI)
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "5", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("TERSE_STORE", "/tmp/x", 1);
    auto info = readBootstrapEnv();
    ASSERT_TRUE(info.isOk()) << info.status().toString();
    EXPECT_EQ(info->rank, 3);
    EXPECT_EQ(info->size, 5);
    EXPECT_EQ(info->localRank, 1);
    EXPECT_EQ(info->rankSource, "OMPI_COMM_WORLD_RANK");
  }
  {
    EnvGuard guard;  // srun
    setenv("SLURM_PROCID", "6", 1);
    setenv("SLURM_NTASKS", "7", 1);
    setenv("SLURM_LOCALID", "2", 1);
    setenv("TERSE_STORE", "n1:5000", 1);
    auto info = readBootstrapEnv();
    ASSERT_TRUE(info.isOk()) << info.status().toString();
    EXPECT_EQ(info->rank, 6);
    EXPECT_EQ(info->size, 7);
    EXPECT_EQ(info->localRank, 2);
  }
  {
    EnvGuard guard;  // torchrun: the store is MASTER_ADDR:MASTER_PORT+1 (torch's is on MASTER_PORT)
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    auto info = readBootstrapEnv();
    ASSERT_TRUE(info.isOk()) << info.status().toString();
    EXPECT_EQ(info->rank, 1);
    EXPECT_EQ(info->store, "10.0.0.1:29501");
  }
  {
    EnvGuard guard;  // TERSE_STORE wins over torchrun's address
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("TERSE_STORE", "10.0.0.2:7000", 1);
    auto info = readBootstrapEnv();
    ASSERT_TRUE(info.isOk()) << info.status().toString();
    EXPECT_EQ(info->store, "10.0.0.2:7000");
  }
}

TEST(Bootstrap, BadEnvironmentsSayWhatToSet) {
  {
    EnvGuard guard;  // nothing set: a world of one
    auto info = readBootstrapEnv();
    ASSERT_TRUE(info.isOk());
    EXPECT_EQ(info->size, 1);
    EXPECT_EQ(info->rank, 0);
  }
  {
    EnvGuard guard;
    setenv("TERSE_RANK", "1", 1);
    auto info = readBootstrapEnv();
    ASSERT_FALSE(info.isOk());
    EXPECT_NE(info.status().message().find("TERSE_WORLD_SIZE"), std::string::npos);
  }
  {
    EnvGuard guard;
    setenv("TERSE_RANK", "4", 1);
    setenv("TERSE_WORLD_SIZE", "4", 1);
    setenv("TERSE_STORE", "/tmp/x", 1);
    auto info = readBootstrapEnv();
    ASSERT_FALSE(info.isOk());
    EXPECT_NE(info.status().message().find("rank 4"), std::string::npos);
  }
  {
    EnvGuard guard;
    setenv("TERSE_RANK", "0", 1);
    setenv("TERSE_WORLD_SIZE", "2", 1);
    auto info = readBootstrapEnv();
    ASSERT_FALSE(info.isOk());
    EXPECT_NE(info.status().message().find("TERSE_STORE"), std::string::npos);
  }
  {
    EnvGuard guard;
    setenv("SLURM_PROCID", "x1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    auto info = readBootstrapEnv();
    ASSERT_FALSE(info.isOk());
    EXPECT_NE(info.status().message().find("SLURM_PROCID='x1'"), std::string::npos);
  }
  for (const char* port : {"65535", "0", "29x", "-3"}) {
    EnvGuard guard;  // torchrun's port leaves no room for terse's store at MASTER_PORT+1
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    auto info = readBootstrapEnv();
    ASSERT_FALSE(info.isOk()) << port;
    EXPECT_NE(info.status().message().find("TERSE_STORE"), std::string::npos) << port;
    EXPECT_NE(info.status().message().find(std::string("MASTER_PORT='") + port), std::string::npos)
        << info.status().message();
  }
}

// The behaviour every store shares.
void checkStoreBasics(Store& store) {
  auto missing = store.tryGet("absent");
  ASSERT_TRUE(missing.isOk()) << missing.status().toString();
  EXPECT_FALSE(missing->has_value());
  std::string binary("a\0b/\xff", 5);
  ASSERT_TRUE(store.set("dir/key with spaces", binary).isOk());
  auto got = store.get("dir/key with spaces", milliseconds(1000));
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(*got, binary);
  ASSERT_TRUE(store.set("empty", "").isOk());
  EXPECT_EQ(store.get("empty", milliseconds(1000)).value(), "");
  // A get waits for a later set.
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_TRUE(store.set("late", "v").isOk());
  });
  auto waited = store.get("late", milliseconds(20000));
  late.join();
  ASSERT_TRUE(waited.isOk()) << waited.status().toString();
  EXPECT_EQ(*waited, "v");
  // A timeout names the key.
  auto timeout = store.get("never", milliseconds(30));
  ASSERT_FALSE(timeout.isOk());
  EXPECT_EQ(timeout.status().code(), StatusCode::kTimeout);
  EXPECT_NE(timeout.status().message().find("never"), std::string::npos);
  Status all = store.waitAll({"empty", "never", "late", "nor-this"}, milliseconds(30));
  EXPECT_EQ(all.code(), StatusCode::kTimeout);
  EXPECT_NE(all.message().find("'never', 'nor-this'"), std::string::npos) << all.message();
}

TEST(Store, Memory) {
  auto store = createMemoryStore();
  checkStoreBasics(*store);
}

TEST(Store, File) {
  char templ[] = "/tmp/terse-store-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  std::string dir = std::string(templ) + "/sub";
  auto store = createFileStore(dir);
  ASSERT_TRUE(store.isOk()) << store.status().toString();
  checkStoreBasics(**store);
  EXPECT_FALSE(createFileStore("").isOk());
  (void)!std::system((std::string("rm -rf ") + templ).c_str());
}

TEST(Store, TcpServerAndClients) {
  const int port = freePort();
  auto server = createTcpStore("127.0.0.1", port, true, milliseconds(5000));
  ASSERT_TRUE(server.isOk()) << server.status().toString();
  checkStoreBasics(**server);
  // Other clients see the server's keys and each other's.
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&, i] {
      auto c = createTcpStore("127.0.0.1", port, false, milliseconds(5000));
      ASSERT_TRUE(c.isOk()) << c.status().toString();
      EXPECT_EQ((*c)->get("dir/key with spaces", milliseconds(1000)).value().size(), 5u);
      ASSERT_TRUE((*c)->set("client" + std::to_string(i), std::string(100000, 'a' + i)).isOk());
      for (int j = 0; j < 4; ++j) {
        auto v = (*c)->get("client" + std::to_string(j), milliseconds(20000));
        ASSERT_TRUE(v.isOk()) << v.status().toString();
        EXPECT_EQ(*v, std::string(100000, 'a' + j));
      }
    });
  for (auto& t : clients) t.join();
  // Two servers cannot share a port.
  auto second = createTcpStore("127.0.0.1", port, true, milliseconds(200));
  ASSERT_FALSE(second.isOk());
  EXPECT_NE(second.status().message().find(std::to_string(port)), std::string::npos);
}

// Port 0: the serving store binds a port the kernel picks (no probe, so nothing can take it in
// between) and reports it; clients reach the store there, and describe() names it. Only a serving
// store may ask for 0.
TEST(Store, TcpServerOnAPortTheKernelPicks) {
  int port = -1;
  auto server = createTcpStore("127.0.0.1", 0, true, milliseconds(5000), &port);
  ASSERT_TRUE(server.isOk()) << server.status().toString();
  ASSERT_GT(port, 0);
  ASSERT_LE(port, 65535);
  EXPECT_EQ((*server)->describe(), "tcp(127.0.0.1:" + std::to_string(port) + ")");
  ASSERT_TRUE((*server)->set("k", "v").isOk());
  int clientPort = -1;
  auto client = createTcpStore("127.0.0.1", port, false, milliseconds(5000), &clientPort);
  ASSERT_TRUE(client.isOk()) << client.status().toString();
  EXPECT_EQ(clientPort, port);
  auto v = (*client)->get("k", milliseconds(1000));
  ASSERT_TRUE(v.isOk()) << v.status().toString();
  EXPECT_EQ(*v, "v");
  // A second server on the reported port is refused: the port really is held.
  auto second = createTcpStore("127.0.0.1", port, true, milliseconds(200));
  EXPECT_FALSE(second.isOk());
  auto clientOfNothing = createTcpStore("127.0.0.1", 0, false, milliseconds(200));
  ASSERT_FALSE(clientOfNothing.isOk());
  EXPECT_EQ(clientOfNothing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(createTcpStore("127.0.0.1", 65536, true, milliseconds(200)).isOk());
  EXPECT_FALSE(createTcpStore("127.0.0.1", -1, true, milliseconds(200)).isOk());
}

TEST(Store, TcpClientErrorsNameTheStore) {
  const int port = freePort();
  // Nobody serves: a timeout that names the address and rank 0.
  auto none = createTcpStore("127.0.0.1", port, false, milliseconds(100));
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.status().code(), StatusCode::kTimeout);
  EXPECT_NE(none.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
  EXPECT_NE(none.status().message().find("rank 0"), std::string::npos);
  // The server goes away: the client's next call is a remote error, not a hang.
  auto server = createTcpStore("127.0.0.1", port, true, milliseconds(2000));
  ASSERT_TRUE(server.isOk());
  auto client = createTcpStore("127.0.0.1", port, false, milliseconds(2000));
  ASSERT_TRUE(client.isOk());
  ASSERT_TRUE((*client)->set("k", "v").isOk());
  server->reset();
  Status after = (*client)->set("k2", "v");
  EXPECT_EQ(after.code(), StatusCode::kRemoteError) << after.toString();
  EXPECT_NE(after.message().find("rank 0"), std::string::npos);
  EXPECT_EQ((*client)->set("k3", "v").code(), StatusCode::kRemoteError) << "stays broken";
}

// A raw client speaking the frame format of tcp_store_protocol.h byte by byte: a well-formed set
// and get are answered with the documented bytes, and a request with an unknown op or a length
// over 64 MiB makes the server drop that client (before allocating anything) while it keeps
// serving the others. fuzz_store covers the same parser with arbitrary bytes.
TEST(Store, TcpServerFramesAndMalformedRequests) {
  const int port = freePort();
  auto server = createTcpStore("127.0.0.1", port, true, milliseconds(5000));
  ASSERT_TRUE(server.isOk()) << server.status().toString();
  auto rawConnect = [&] {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{10, 0};  // a server that neither answers nor hangs up fails the test, not hangs it
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  };
  auto frame = [](uint8_t op, const std::string& key, const std::string& value, uint32_t keyLen,
                  uint32_t valueLen) {
    std::string f(1, static_cast<char>(op));
    f.append(reinterpret_cast<const char*>(&keyLen), 4);
    f.append(reinterpret_cast<const char*>(&valueLen), 4);
    return f + key + value;
  };
  auto recvAll = [](int fd, size_t n) {
    std::string got;
    char buf[256];
    while (got.size() < n) {
      ssize_t k = ::recv(fd, buf, std::min(sizeof buf, n - got.size()), 0);
      if (k <= 0) break;
      got.append(buf, static_cast<size_t>(k));
    }
    return got;
  };

  int fd = rawConnect();
  std::string set = frame(1, "raw", "value", 3, 5);
  ASSERT_EQ(::send(fd, set.data(), set.size(), 0), static_cast<ssize_t>(set.size()));
  EXPECT_EQ(recvAll(fd, 5), std::string("\x01\x00\x00\x00\x00", 5));
  std::string get = frame(2, "raw", "", 3, 0);
  ASSERT_EQ(::send(fd, get.data(), get.size(), 0), static_cast<ssize_t>(get.size()));
  EXPECT_EQ(recvAll(fd, 10), std::string("\x01\x05\x00\x00\x00value", 10));
  ::close(fd);

  for (const std::string& bad : {frame(7, "", "", 0, 0), frame(1, "", "", 0xffffffffu, 0),
                                 frame(2, "", "", 1, (64u << 20) + 1)}) {
    fd = rawConnect();
    ASSERT_EQ(::send(fd, bad.data(), bad.size(), 0), static_cast<ssize_t>(bad.size()));
    char c;
    EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "the server hangs up on a malformed request";
    ::close(fd);
  }
  auto client = createTcpStore("127.0.0.1", port, false, milliseconds(5000));
  ASSERT_TRUE(client.isOk()) << client.status().toString();
  auto v = (*client)->get("raw", milliseconds(5000));
  ASSERT_TRUE(v.isOk()) << v.status().toString();
  EXPECT_EQ(*v, "value");
}

TEST(StoreAllGather, ThreadsGetEveryValueInRankOrder) {
  for (int n : {1, 2, 3, 8}) {
    auto store = createMemoryStore();
    std::vector<std::vector<std::string>> got(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        auto all =
            storeAllGather(*store, "x", r, n, "value" + std::to_string(r * 7), milliseconds(20000));
        ASSERT_TRUE(all.isOk()) << all.status().toString();
        got[r] = *all;
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(got[r].size(), static_cast<size_t>(n));
      for (int q = 0; q < n; ++q) EXPECT_EQ(got[r][q], "value" + std::to_string(q * 7));
    }
  }
}

TEST(StoreAllGather, MissingRanksAreNamed) {
  auto store = createMemoryStore();
  // Ranks 0 and 2 of 4 arrive; 1 and 3 never do.
  std::thread other([&] { (void)storeAllGather(*store, "y", 2, 4, "b", milliseconds(100)); });
  auto r = storeAllGather(*store, "y", 0, 4, "a", milliseconds(100));
  other.join();
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_NE(r.status().message().find("ranks 1, 3 (2 missing)"), std::string::npos)
      << r.status().message();
}

TEST(StoreAllGather, VersionMismatchIsNamed) {
  auto store = createMemoryStore();
  // What a rank running another terse release would publish.
  ASSERT_TRUE(store->set("z/rank/1", "terse 99.0.0 size 2\nfoo").isOk());
  auto r = storeAllGather(*store, "z", 0, 2, "a", milliseconds(5000));
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidUsage);
  EXPECT_NE(r.status().message().find("rank 1 announced 'terse 99.0.0 size 2'"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace terse

namespace terse {
namespace {

// The topology every rank derives from the node keys (include/terse/topology.h).
TEST(Topology, NodesAreNumberedByTheirLowestRankAndLocalRanksFollowRankOrder) {
  const std::vector<std::string> keys = {"b", "a", "b", "c", "a", "b", "c"};
  Topology t = Topology::fromNodeKeys(keys, 5);
  EXPECT_EQ(t.nodeOfRank, (std::vector<int>{0, 1, 0, 2, 1, 0, 2}));
  EXPECT_EQ(t.nodeCount, 3);
  EXPECT_EQ(t.node, 0);
  EXPECT_EQ(t.localRank, 2);
  EXPECT_EQ(t.localSize, 3);
  EXPECT_EQ(t.ranksOn(2), (std::vector<int>{3, 6}));
  EXPECT_FALSE(t.uniform());
  EXPECT_EQ(t.describe(), "3 nodes (3+2+2 ranks)");
  Topology u = Topology::fromNodeKeys({"x", "x", "y", "y"}, 3);
  EXPECT_TRUE(u.uniform());
  EXPECT_EQ(u.describe(), "2 nodes x 2 ranks");
  EXPECT_EQ(u.localRank, 1);
  EXPECT_EQ(Topology::singleNode(4, 2).describe(), "1 node x 4 ranks");
  EXPECT_EQ(Topology::fromNodeKeys({"solo"}, 0).describe(), "1 node x 1 rank");
}

TEST(Topology, ExchangedThroughTheStoreFromTerseNode) {
  auto store = createMemoryStore();
  // TERSE_NODE's value as the communicator read it (the rendezvous never reads it itself).
  EXPECT_EQ(nodeKey("rack1"), "TERSE_NODE=rack1");
  const std::string host = nodeKey("");
  EXPECT_NE(host.find('/'), std::string::npos) << "hostname/boot id: " << host;
  // Ranks as threads all see this process's key: one node.
  std::vector<Topology> got(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto t = exchangeTopology(*store, "topo", r, 3, std::chrono::milliseconds(10000), "");
      ASSERT_TRUE(t.isOk()) << t.status().toString();
      got[r] = *t;
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r].nodeCount, 1);
    EXPECT_EQ(got[r].localRank, r);
  }
}

}  // namespace
}  // namespace terse
