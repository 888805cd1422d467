/* Loads the plugin from plain C, as NCCL does: RTLD_NOW makes any unresolved C++ symbol fail
 * the load. Then checks the name of each table of every version (abi/nccl_plugin.h) and runs
 * v12 (what NCCL 2.30+ picks first) init/devices/getProperties/finalize. */
#include "abi/nccl_plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s path/to/libnccl-net-terse.so\n", argv[0]);
    return 2;
  }
  void* dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL) {
    fprintf(stderr, "dlopen failed: %s\n", dlerror());
    return 1;
  }
  const int versions[] = {TERSE_NCCL_ABI_VERSIONS};
  const char* families[] = {"ncclNetPlugin_v", "ncclCollNetPlugin_v"};
  for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); ++i) {
    for (int f = 0; f < 2; ++f) {
      char name[64];
      snprintf(name, sizeof(name), "%s%d", families[f], versions[i]);
      const char* const* table = (const char* const*)dlsym(dl, name);
      if (table == NULL || strcmp(*table, "terse") != 0) {
        fprintf(stderr, "%s missing or misnamed\n", name);
        return 1;
      }
    }
  }
  if (dlsym(dl, "ncclNetPlugin_v7") != NULL) {
    fprintf(stderr, "ncclNetPlugin_v7 should not exist\n");
    return 1;
  }
  const ncclNet_v12_t* net = (const ncclNet_v12_t*)dlsym(dl, "ncclNetPlugin_v12");
  void* ctx = NULL;
  int ndev = -1;
  ncclNetProperties_v12_t props;
  if (net->init(&ctx, 1, NULL, NULL, NULL) != ncclSuccess || ctx == NULL ||
      net->devices(&ndev) != ncclSuccess || ndev != 1 ||
      net->getProperties(0, &props) != ncclSuccess || net->finalize(ctx) != ncclSuccess) {
    fprintf(stderr, "v12 init/devices/getProperties/finalize failed (ndev %d)\n", ndev);
    return 1;
  }
  if (props.railId != NCCL_NET_ID_UNDEF || props.planeId != NCCL_NET_ID_UNDEF ||
      props.vProps.ndevs != 1) {
    fprintf(stderr, "v12 properties: railId %d planeId %d vProps.ndevs %d\n", props.railId,
            props.planeId, props.vProps.ndevs);
    return 1;
  }
  printf("loaded %s: device %s speed %d Mbit/s ptrSupport %#x maxRecvs %d maxComms %d\n", net->name,
         props.name, props.speed, props.ptrSupport, props.maxRecvs, props.maxComms);
  if (dlclose(dl) != 0) {
    fprintf(stderr, "dlclose failed: %s\n", dlerror());
    return 1;
  }
  return 0;
}
