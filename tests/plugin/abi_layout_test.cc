// The plugin's ABI headers against the layouts NCCL's releases define. Each struct is described
// here a second time, independently of the headers, as NCCL's header lists it: member names in
// order with their C kinds. The expected offsets follow from the C layout rules (each member at
// the next multiple of its alignment, the struct padded to its largest alignment) and are
// compared with offsetof/sizeof of the structs the plugin compiles. A reordered, retyped,
// missing or extra member in a header of plugin/abi fails here, naming the member. (The headers
// pin the same offsets with static asserts; this is the second, independent description.)
//
// Sources of the descriptions: /work/shared/design/nccl-plugin-abi.md (v8..v11, NCCL 2.19-2.28)
// and NCCL's src/include/plugin/net/net_v12.h (v12, NCCL 2.30+).
#include "abi/nccl_plugin.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// A new ABI version is described below before it counts as covered.
static_assert(TERSE_NCCL_ABI_NEWEST == 12,
              "describe the new version's structs and tables below (PropertiesOfEveryVersion, "
              "NetTables, CollNetTables), then raise this number");

namespace {

// A member as NCCL declares it: C kind -> (size, alignment) on LP64.
enum class Kind {
  kPtr,
  kU64,
  kSize,
  kInt,
  kFloat,
  kI16,
  kDevs4,
  kDevs8,
  kVProps4,
  kVProps8,
  kCommAttr
};

struct Layout {
  size_t size, align;
};
Layout layoutOf(Kind k) {
  switch (k) {
    case Kind::kPtr:
    case Kind::kU64:
    case Kind::kSize: return {8, 8};
    case Kind::kInt:
    case Kind::kFloat: return {4, 4};
    case Kind::kI16: return {2, 2};
    case Kind::kDevs4: return {4 * 4, 4};        // int devs[4]
    case Kind::kDevs8: return {4 * 8, 4};        // int devs[8]
    case Kind::kVProps4: return {4 + 4 * 4, 4};  // {int ndevs; int devs[4];}
    case Kind::kVProps8: return {4 + 4 * 8, 4};  // {int ndevs; int devs[8];}
    case Kind::kCommAttr: return {4 * 4, 4};     // four int32_t
  }
  return {0, 1};
}

struct Member {
  const char* name;
  Kind kind;
  size_t actualOffset;  // offsetof in the plugin's header
};

// Walks the description with the C layout rules and checks every member and the total size.
void expectLayout(const char* structName, const std::vector<Member>& members, size_t actualSize) {
  size_t at = 0, maxAlign = 1;
  for (const Member& m : members) {
    Layout l = layoutOf(m.kind);
    at = (at + l.align - 1) / l.align * l.align;
    EXPECT_EQ(m.actualOffset, at) << structName << "." << m.name;
    at += l.size;
    if (l.align > maxAlign) maxAlign = l.align;
  }
  size_t size = (at + maxAlign - 1) / maxAlign * maxAlign;
  EXPECT_EQ(actualSize, size) << "sizeof(" << structName << ")";
}

// A table is a struct of pointers only (name, then the entry points in NCCL's order).
void expectTable(const char* tableName, const std::vector<Member>& members, size_t actualSize) {
  std::vector<Member> m = members;
  for (Member& x : m) x.kind = Kind::kPtr;
  expectLayout(tableName, m, actualSize);
}

#define M(S, f, k) \
  Member { #f, Kind::k, offsetof(S, f) }
#define F(S, f) \
  Member { #f, Kind::kPtr, offsetof(S, f) }

// `base` with `more` after it: a later version's members are an earlier one's and its own.
std::vector<Member> appended(std::vector<Member> base, std::initializer_list<Member> more) {
  base.insert(base.end(), more);
  return base;
}

TEST(PluginAbiLayout, HelperStructs) {
  using DH = ncclNetDeviceHandle_v11_t;
  expectLayout("ncclNetDeviceHandle_v11_t",
               {M(DH, netDeviceType, kInt), M(DH, netDeviceVersion, kInt), M(DH, handle, kPtr),
                M(DH, size, kSize), M(DH, needsProxyProgress, kInt)},
               sizeof(DH));
  using V4 = ncclNetVDeviceProps_v11_t;
  expectLayout("ncclNetVDeviceProps_v11_t", {M(V4, ndevs, kInt), M(V4, devs, kDevs4)}, sizeof(V4));
  EXPECT_EQ(sizeof(V4::devs), layoutOf(Kind::kDevs4).size) << "v9..v11: 4 devices per vNIC";
  EXPECT_EQ(sizeof(V4), layoutOf(Kind::kVProps4).size);
  using V8 = ncclNetVDeviceProps_v12_t;
  expectLayout("ncclNetVDeviceProps_v12_t", {M(V8, ndevs, kInt), M(V8, devs, kDevs8)}, sizeof(V8));
  EXPECT_EQ(sizeof(V8::devs), layoutOf(Kind::kDevs8).size) << "v12: 8 devices per vNIC";
  EXPECT_EQ(sizeof(V8), layoutOf(Kind::kVProps8).size);
  using A = ncclNetAttr_v11_t;
  expectLayout("ncclNetAttr_v11_t",
               {M(A, sendCommAttr, kCommAttr), M(A, recvCommAttr, kCommAttr), M(A, op, kInt),
                M(A, algo, kInt), M(A, proto, kInt)},
               sizeof(A));
  expectLayout("ncclNetCommConfig_v11_t", {M(ncclNetCommConfig_v11_t, trafficClass, kInt)},
               sizeof(ncclNetCommConfig_v11_t));
  using S11 = ncclNetSGE_v11_t;  // v9 and v10 too
  expectLayout("ncclNetSGE_v11_t",
               {M(S11, mhandle, kPtr), M(S11, address, kPtr), M(S11, size, kSize)}, sizeof(S11));
  using S8 = ncclNetSGE_v8_t;
  expectLayout("ncclNetSGE_v8_t", {M(S8, mhandle, kPtr), M(S8, address, kPtr), M(S8, size, kInt)},
               sizeof(S8));
}

// ncclNetProperties v9..v12: the same members up to maxCollBytes (vProps of v12 holds 8
// devices, the others' 4); v11 appends maxMultiRequestSize, v12 then railId and planeId.
template <typename P>
std::vector<Member> propertiesV9Members(Kind vProps) {
  return appended({M(P, name, kPtr), M(P, pciPath, kPtr), M(P, guid, kU64), M(P, ptrSupport, kInt),
                   M(P, regIsGlobal, kInt), M(P, forceFlush, kInt), M(P, speed, kInt),
                   M(P, port, kInt), M(P, latency, kFloat), M(P, maxComms, kInt),
                   M(P, maxRecvs, kInt), M(P, netDeviceType, kInt), M(P, netDeviceVersion, kInt)},
                  {Member{"vProps", vProps, offsetof(P, vProps)}, M(P, maxP2pBytes, kSize),
                   M(P, maxCollBytes, kSize)});
}

TEST(PluginAbiLayout, PropertiesOfEveryVersion) {
  using P12 = ncclNetProperties_v12_t;
  expectLayout(
      "ncclNetProperties_v12_t",
      appended(propertiesV9Members<P12>(Kind::kVProps8),
               {M(P12, maxMultiRequestSize, kInt), M(P12, railId, kI16), M(P12, planeId, kI16)}),
      sizeof(P12));
  using P11 = ncclNetProperties_v11_t;
  expectLayout(
      "ncclNetProperties_v11_t",
      appended(propertiesV9Members<P11>(Kind::kVProps4), {M(P11, maxMultiRequestSize, kInt)}),
      sizeof(P11));
  expectLayout("ncclNetProperties_v10_t",  // also v9
               propertiesV9Members<ncclNetProperties_v10_t>(Kind::kVProps4),
               sizeof(ncclNetProperties_v10_t));
  using P8 = ncclNetProperties_v8_t;
  expectLayout("ncclNetProperties_v8_t",
               {M(P8, name, kPtr), M(P8, pciPath, kPtr), M(P8, guid, kU64), M(P8, ptrSupport, kInt),
                M(P8, regIsGlobal, kInt), M(P8, speed, kInt), M(P8, port, kInt),
                M(P8, latency, kFloat), M(P8, maxComms, kInt), M(P8, maxRecvs, kInt),
                M(P8, netDeviceType, kInt), M(P8, netDeviceVersion, kInt)},
               sizeof(P8));
}

// ncclNet v8..v12 share the member order up to irecvConsumed (v8's last); v9 and v10 append
// makeVDevice, v11 and v12 then finalize and setNetAttr.
template <typename T>
std::vector<Member> netV8Members() {
  return {F(T, name),        F(T, init),        F(T, devices),      F(T, getProperties),
          F(T, listen),      F(T, connect),     F(T, accept),       F(T, regMr),
          F(T, regMrDmaBuf), F(T, deregMr),     F(T, isend),        F(T, irecv),
          F(T, iflush),      F(T, test),        F(T, closeSend),    F(T, closeRecv),
          F(T, closeListen), F(T, getDeviceMr), F(T, irecvConsumed)};
}
template <typename T>
std::vector<Member> netV9Members() {
  return appended(netV8Members<T>(), {F(T, makeVDevice)});
}
template <typename T>
std::vector<Member> netV11Members() {
  return appended(netV9Members<T>(), {F(T, finalize), F(T, setNetAttr)});
}

TEST(PluginAbiLayout, NetTables) {
  expectTable("ncclNet_v12_t", netV11Members<ncclNet_v12_t>(), sizeof(ncclNet_v12_t));
  expectTable("ncclNet_v11_t", netV11Members<ncclNet_v11_t>(), sizeof(ncclNet_v11_t));
  expectTable("ncclNet_v10_t", netV9Members<ncclNet_v10_t>(), sizeof(ncclNet_v10_t));
  expectTable("ncclNet_v9_t", netV9Members<ncclNet_v9_t>(), sizeof(ncclNet_v9_t));
  expectTable("ncclNet_v8_t", netV8Members<ncclNet_v8_t>(), sizeof(ncclNet_v8_t));
}

// ncclCollNet v9..v12 share the member order; v11/v12 end with finalize, v8 has no makeVDevice.
template <typename T>
std::vector<Member> collNetMembers() {
  return {F(T, name),           F(T, init),    F(T, devices),       F(T, getProperties),
          F(T, listen),         F(T, connect), F(T, reduceSupport), F(T, regMr),
          F(T, regMrDmaBuf),    F(T, deregMr), F(T, iallreduce),    F(T, iallgather),
          F(T, ireducescatter), F(T, iflush),  F(T, test),          F(T, closeColl),
          F(T, closeListen)};
}

template <typename T>
std::vector<Member> collNetV9Members() {
  return appended(collNetMembers<T>(), {F(T, makeVDevice)});
}
template <typename T>
std::vector<Member> collNetV11Members() {
  return appended(collNetV9Members<T>(), {F(T, finalize)});
}

TEST(PluginAbiLayout, CollNetTables) {
  expectTable("ncclCollNet_v12_t", collNetV11Members<ncclCollNet_v12_t>(),
              sizeof(ncclCollNet_v12_t));
  expectTable("ncclCollNet_v11_t", collNetV11Members<ncclCollNet_v11_t>(),
              sizeof(ncclCollNet_v11_t));
  // v10 is the same table as v9
  expectTable("ncclCollNet_v9_t", collNetV9Members<ncclCollNet_v9_t>(), sizeof(ncclCollNet_v9_t));
  expectTable("ncclCollNet_v8_t", collNetMembers<ncclCollNet_v8_t>(), sizeof(ncclCollNet_v8_t));
}

// The describing code itself must be able to fail: a description that disagrees with a struct
// by one member is caught (checked on a local struct so this test does not depend on a header).
TEST(PluginAbiLayout, ADescriptionThatDisagreesIsCaught) {
  struct Probe {
    int a;
    void* b;
    int16_t c;
  };
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    // Claims b is an int: b's offset (4 described, 8 real) disagrees.
    expectLayout("Probe", {M(Probe, a, kInt), M(Probe, b, kInt), M(Probe, c, kI16)}, sizeof(Probe));
  }
  EXPECT_GE(failures.size(), 1);
  // And the right description passes.
  expectLayout("Probe", {M(Probe, a, kInt), M(Probe, b, kPtr), M(Probe, c, kI16)}, sizeof(Probe));
}

}  // namespace
