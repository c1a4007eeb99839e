/* Loads the out-of-tree plugin like the daemon does (dlopen RTLD_NOW |
 * RTLD_LOCAL, the one entry symbol, the ABI version check) and runs its
 * handler once with a host table that keeps the output in a buffer. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <tpool/plugin.h>

struct tpool_job {
  uint8_t out[64];
  size_t size;
};

static int32_t output_write(tpool_job* job, const void* data, size_t size) {
  if (job->size + size > sizeof job->out) return TPOOL_STATUS_OUTPUT_TOO_LARGE;
  memcpy(job->out + job->size, data, size);
  job->size += size;
  return TPOOL_STATUS_OK;
}

static void* output_reserve(tpool_job* job, size_t size) {
  if (job->size + size > sizeof job->out) return NULL;
  void* p = job->out + job->size;
  job->size += size;
  return p;
}

int main(void) {
  void* so = dlopen(UPPER_PATH, RTLD_NOW | RTLD_LOCAL);
  if (so == NULL) {
    printf("dlopen %s failed: %s\n", UPPER_PATH, dlerror());
    return 1;
  }
  tpool_plugin_entry_fn entry = NULL;
  *(void**)(&entry) = dlsym(so, TPOOL_PLUGIN_ENTRY_SYMBOL);
  if (entry == NULL) {
    printf("%s does not export %s\n", UPPER_PATH, TPOOL_PLUGIN_ENTRY_SYMBOL);
    return 1;
  }
  tpool_host_api host;
  memset(&host, 0, sizeof host);
  host.struct_size = (uint32_t)sizeof host;
  host.abi_major = TPOOL_PLUGIN_ABI_MAJOR;
  host.abi_minor = TPOOL_PLUGIN_ABI_MINOR;
  host.output_write = output_write;
  host.output_reserve = output_reserve;
  const tpool_plugin* p = entry(&host);
  if (p == NULL || p->abi_major != TPOOL_PLUGIN_ABI_MAJOR || p->handler_count != 1 ||
      p->struct_size != sizeof(tpool_plugin) || p->handler_size != sizeof(tpool_handler)) {
    printf("the plugin's descriptor does not match ABI %d.%d\n", TPOOL_PLUGIN_ABI_MAJOR,
           TPOOL_PLUGIN_ABI_MINOR);
    return 1;
  }
  tpool_job job;
  memset(&job, 0, sizeof job);
  const char input[] = "hello, tpool";
  int32_t st = p->handlers[0].call(NULL, &job, (const uint8_t*)input, strlen(input));
  printf("plugin: %s %s abi=%u.%u handler=%s status=%d output=%.*s\n", p->name, p->version,
         p->abi_major, p->abi_minor, p->handlers[0].name, st, (int)job.size, (const char*)job.out);
  dlclose(so);
  return st == TPOOL_STATUS_OK ? 0 : 1;
}
