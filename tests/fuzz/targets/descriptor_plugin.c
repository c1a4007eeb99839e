/* The plugin of fuzz target (c): its entry builds a tpool_plugin descriptor
 * from the fuzzer's bytes (tpool_fuzz_descriptor_data, exported by the fuzz
 * executable), so the plugin host's checks of struct sizes, ABI versions,
 * names, handler strides and counts, lanes and init failures see arbitrary
 * values. Every pointer it hands out stays valid (the host trusts plugin
 * memory by design: a descriptor that lies about its own memory is code the
 * daemon already runs); everything else is the fuzzer's.
 *
 * Each load is a fresh dlopen of a fresh staging copy, so the static buffers
 * below start zeroed every time. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tpool/plugin.h"

extern const unsigned char* tpool_fuzz_descriptor_data;
extern size_t tpool_fuzz_descriptor_size;

#define MAX_HANDLERS 4096 /* the host's own limit: more is refused unread */
#define MAX_STRIDE (2 * sizeof(tpool_handler))
#define STR_SLOTS 24
#define STR_BYTES 80

static unsigned char handler_buf[MAX_HANDLERS * MAX_STRIDE];
static unsigned char plugin_buf[sizeof(tpool_plugin) + 64];
static char strings[STR_SLOTS][STR_BYTES];
static const unsigned char* in;
static size_t left;
static int init_fails;

static uint32_t u8(void) {
  if (left == 0) return 0;
  --left;
  return *in++;
}

static uint32_t u32(void) {
  uint32_t v = u8();
  v |= u8() << 8;
  v |= u8() << 16;
  v |= u8() << 24;
  return v;
}

/* A NUL-terminated string of up to 71 input bytes, or NULL. */
static const char* str(int slot) {
  uint32_t n = u8();
  if (n == 0xff) return NULL;
  n %= 72;
  if (n > left) n = (uint32_t)left;
  memcpy(strings[slot], in, n);
  strings[slot][n] = '\0';
  in += n;
  left -= n;
  return strings[slot];
}

static int32_t call_ok(void* ctx, tpool_job* job, const uint8_t* input, size_t n) {
  (void)ctx;
  (void)job;
  (void)input;
  (void)n;
  return TPOOL_STATUS_OK;
}

static int32_t init_fn(const tpool_host_api* host, const char* config, void** ctx, char* error,
                       size_t error_size) {
  (void)host;
  (void)config;
  (void)ctx;
  if (!init_fails) return 0;
  snprintf(error, error_size, "%s", strings[STR_SLOTS - 1]);
  return 1;
}

static void fini_fn(void* ctx) {
  (void)ctx;
}

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* host) {
  (void)host;
  in = tpool_fuzz_descriptor_data;
  left = tpool_fuzz_descriptor_size;
  uint32_t flags = u8();
  if (flags & 0x80) return NULL; /* the plugin refuses this host */
  tpool_plugin p;
  memset(&p, 0, sizeof p);
  p.struct_size = (flags & 1) ? u32() : (uint32_t)sizeof(tpool_plugin);
  p.abi_major = (flags & 2) ? u32() : TPOOL_PLUGIN_ABI_MAJOR;
  p.abi_minor = (flags & 4) ? u32() : TPOOL_PLUGIN_ABI_MINOR;
  uint32_t stride =
      (flags & 8) ? u8() % (uint32_t)(MAX_STRIDE + 1) : (uint32_t)sizeof(tpool_handler);
  p.handler_size = stride;
  p.name = str(0);
  p.version = str(1);
  p.description = str(2);
  uint32_t count = u8();
  if (count & 0x80) {
    count = u32(); /* anything: above MAX_HANDLERS the host must refuse before reading */
  } else {
    count %= 9;
  }
  p.handler_count = count;
  p.handlers = u8() == 0xff ? NULL : (const tpool_handler*)(void*)handler_buf;
  uint32_t filled = count < 8 ? count : 8;
  if (stride == 0) filled = 0;
  for (uint32_t i = 0; i < filled; ++i) {
    tpool_handler h;
    memset(&h, 0, sizeof h);
    h.name = str((int)(3 + 2 * i));
    h.description = str((int)(4 + 2 * i));
    uint32_t lane = u8();
    h.lane = lane < 250 ? lane % 2 : u32();
    h.max_input_bytes = u8();
    h.call = u8() == 0xfe ? NULL : call_ok;
    memcpy(handler_buf + (size_t)i * stride, &h, stride < sizeof h ? stride : sizeof h);
  }
  init_fails = (int)(u8() & 1);
  (void)str(STR_SLOTS - 1); /* init's error message */
  p.init = (flags & 16) ? init_fn : NULL;
  p.fini = (flags & 32) ? fini_fn : NULL;
  memcpy(plugin_buf, &p, sizeof p);
  return (const tpool_plugin*)(void*)plugin_buf;
}
