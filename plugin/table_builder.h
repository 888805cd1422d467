// What net_tables.cc and collnet_tables.cc share to fill the table of every ABI version from one
// set of entry points. Each fills a table with one template (netTable, collNetTable): a member
// takes the entry-point overload whose type is the member's type, and members a version lacks
// are skipped, so a version's table is one line and a version whose signatures are an older
// one's needs no new code. A changed signature fails to compile, naming the member, until its
// overload exists.
#pragma once

#include "abi/nccl_plugin.h"

#include <type_traits>

// What every exported table is declared with: C linkage (a namespace-scope const has internal
// linkage in C++) and default visibility (the rest of the library is hidden; exports.map).
#define TERSE_NCCL_TABLE extern "C" __attribute__((visibility("default")))

namespace terse::plugin {

// finalize (v11 on) and makeVDevice (v9 on) are the members older tables lack.
template <typename Table, typename = void>
struct HasFinalize : std::false_type {};
template <typename Table>
struct HasFinalize<Table, std::void_t<decltype(&Table::finalize)>> : std::true_type {};

template <typename Table, typename = void>
struct HasMakeVDevice : std::false_type {};
template <typename Table>
struct HasMakeVDevice<Table, std::void_t<decltype(&Table::makeVDevice)>> : std::true_type {};

}  // namespace terse::plugin
