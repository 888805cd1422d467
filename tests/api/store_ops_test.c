/* terse_comm_create_with_store from C (issue 47): a communicator whose ranks meet through the
 * caller's store. Two ranks as two threads of this process over one in-memory store (the ranks of
 * a real job are processes, and the Python package hands them PyTorch's store: tests/torch/
 * backend_test.py), an allreduce on it, and the refusals: a NULL or mis-sized ops struct, a
 * missing function, a rank outside the world, and a store whose set fails. */
#include <terse/terse.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...)                              \
  do {                                                \
    if (!(cond)) {                                    \
      fprintf(stderr, "FAIL line %d: ", __LINE__);    \
      fprintf(stderr, __VA_ARGS__);                   \
      fprintf(stderr, " (%s)\n", terse_last_error()); \
      ++failures;                                     \
    }                                                 \
  } while (0)

/* A store of at most kKeys keys, shared by the threads under one mutex. */
enum { kKeys = 256, kKeyLen = 256 };
typedef struct {
  pthread_mutex_t mutex;
  int count;
  char keys[kKeys][kKeyLen];
  char* values[kKeys];
  size_t sizes[kKeys];
  int fail_set; /* nonzero: every set fails */
} store_t;

/* What get hands back must stay valid until the caller's next call: each rank's copy. */
typedef struct {
  store_t* store;
  char* last;
} client_t;

static int find(store_t* s, const char* key) {
  for (int i = 0; i < s->count; ++i)
    if (strcmp(s->keys[i], key) == 0) return i;
  return -1;
}

static int put(store_t* s, const char* key, const void* value, size_t size) {
  int i = find(s, key);
  if (i < 0) {
    if (s->count == kKeys || strlen(key) >= kKeyLen) return 1;
    i = s->count++;
    strcpy(s->keys[i], key);
    s->values[i] = NULL;
  }
  free(s->values[i]);
  s->values[i] = malloc(size ? size : 1);
  memcpy(s->values[i], value, size);
  s->sizes[i] = size;
  return 0;
}

static void hand_back(client_t* c, int i, const void** value, size_t* size) {
  free(c->last);
  c->last = malloc(c->store->sizes[i] ? c->store->sizes[i] : 1);
  memcpy(c->last, c->store->values[i], c->store->sizes[i]);
  *value = c->last;
  *size = c->store->sizes[i];
}

static int op_set(void* user, const char* key, const void* value, size_t size) {
  client_t* c = user;
  pthread_mutex_lock(&c->store->mutex);
  int rc = c->store->fail_set ? 1 : put(c->store, key, value, size);
  pthread_mutex_unlock(&c->store->mutex);
  return rc;
}

static int op_get(void* user, const char* key, int* found, const void** value, size_t* size) {
  client_t* c = user;
  pthread_mutex_lock(&c->store->mutex);
  int i = find(c->store, key);
  *found = i >= 0;
  if (i >= 0) hand_back(c, i, value, size);
  pthread_mutex_unlock(&c->store->mutex);
  return 0;
}

static int op_set_if_absent(void* user, const char* key, const void* value, size_t size, int* found,
                            const void** existing, size_t* existing_size) {
  client_t* c = user;
  pthread_mutex_lock(&c->store->mutex);
  int i = find(c->store, key), rc = 0;
  *found = i >= 0;
  if (i >= 0)
    hand_back(c, i, existing, existing_size);
  else
    rc = c->store->fail_set ? 1 : put(c->store, key, value, size);
  pthread_mutex_unlock(&c->store->mutex);
  return rc;
}

static terse_store_ops_t ops_for(client_t* c) {
  terse_store_ops_t ops;
  memset(&ops, 0, sizeof ops);
  ops.struct_size = sizeof ops;
  ops.user = c;
  ops.set = op_set;
  ops.get = op_get;
  ops.set_if_absent = op_set_if_absent;
  return ops;
}

typedef struct {
  store_t* store;
  int rank, size;
  terse_status_t status;
  float sum;
} rank_t;

static void* run_rank(void* arg) {
  rank_t* r = arg;
  client_t client = {r->store, NULL};
  terse_store_ops_t ops = ops_for(&client);
  terse_comm_t* comm = NULL;
  r->status = terse_comm_create_with_store(r->rank, r->size, &ops, "threads", 60000, &comm);
  if (r->status == TERSE_OK) {
    float x[3] = {(float)(r->rank + 1), 2.0f, 3.0f};
    r->status = terse_allreduce(comm, x, x, 3, TERSE_FLOAT32, TERSE_SUM, "none", NULL);
    r->sum = x[0];
    if (r->status == TERSE_OK && terse_comm_rank(comm) != r->rank) r->status = TERSE_INTERNAL;
  }
  terse_comm_destroy(comm);
  free(client.last);
  return NULL;
}

static void free_store(store_t* s) {
  for (int i = 0; i < s->count; ++i) free(s->values[i]);
  pthread_mutex_destroy(&s->mutex);
}

int main(void) {
  /* Two ranks, two threads, one store. */
  store_t* store = calloc(1, sizeof *store);
  pthread_mutex_init(&store->mutex, NULL);
  rank_t ranks[2] = {{store, 0, 2, TERSE_INTERNAL, 0}, {store, 1, 2, TERSE_INTERNAL, 0}};
  pthread_t threads[2];
  for (int i = 0; i < 2; ++i) pthread_create(&threads[i], NULL, run_rank, &ranks[i]);
  for (int i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
  for (int i = 0; i < 2; ++i)
    CHECK(ranks[i].status == TERSE_OK && ranks[i].sum == 3.0f, "rank %d: %s, sum %g", i,
          terse_status_name(ranks[i].status), ranks[i].sum);
  free_store(store);

  /* Refusals, on a world of one. */
  memset(store, 0, sizeof *store);
  pthread_mutex_init(&store->mutex, NULL);
  client_t client = {store, NULL};
  terse_store_ops_t ops = ops_for(&client);
  terse_comm_t* comm = NULL;
  terse_status_t s = terse_comm_create_with_store(0, 1, NULL, NULL, 0, &comm);
  CHECK(s == TERSE_INVALID_ARGUMENT && comm == NULL, "NULL store: %s", terse_status_name(s));
  ops.struct_size = sizeof ops - 1;
  s = terse_comm_create_with_store(0, 1, &ops, NULL, 0, &comm);
  CHECK(s == TERSE_INVALID_ARGUMENT && strstr(terse_last_error(), "struct_size") != NULL,
        "mis-sized ops: %s", terse_status_name(s));
  ops = ops_for(&client);
  ops.get = NULL;
  s = terse_comm_create_with_store(0, 1, &ops, NULL, 0, &comm);
  CHECK(s == TERSE_INVALID_ARGUMENT, "no get: %s", terse_status_name(s));
  ops = ops_for(&client);
  s = terse_comm_create_with_store(1, 1, &ops, NULL, 0, &comm);
  CHECK(s == TERSE_INVALID_ARGUMENT && strstr(terse_last_error(), "rank 1 of 1") != NULL,
        "rank 1 of 1: %s", terse_status_name(s));
  s = terse_comm_create_with_store(0, 1, &ops, NULL, 0, NULL);
  CHECK(s == TERSE_INVALID_ARGUMENT, "NULL comm: %s", terse_status_name(s));
  store->fail_set = 1;
  s = terse_comm_create_with_store(0, 1, &ops, "failing", 5000, &comm);
  CHECK(s != TERSE_OK && comm == NULL && strstr(terse_last_error(), "caller's store") != NULL,
        "failing store: %s", terse_status_name(s));
  store->fail_set = 0;
  s = terse_comm_create_with_store(0, 1, &ops, "one", 0, &comm);
  CHECK(s == TERSE_OK && terse_comm_size(comm) == 1, "world of one: %s", terse_status_name(s));
  terse_comm_destroy(comm);
  free(client.last);
  free_store(store);
  free(store);
  if (failures) return 1;
  printf("store_ops_test: ok\n");
  return 0;
}
