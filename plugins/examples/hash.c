/* hash: real CPU work. Input "<n>:<payload>": the SHA-256 of payload, then the
 * SHA-256 of that digest, n times in all (n from 1 to max_iterations); the
 * output is the final digest as 64 lowercase hex digits. "1:abc" gives the
 * FIPS 180-2 test vector ba7816bf...f20015ad.
 *
 * Config string (optional): "max_iterations=<n>" (default 10000000), parsed
 * by init into the plugin context, freed by fini. Checks cancellation every
 * 4096 iterations. Uses libcrypto (OpenSSL 3 EVP API).
 *
 * The digest is fetched once, by init (EVP_MD_fetch), and each call reuses
 * one EVP_MD_CTX for all its iterations. EVP_Digest(..., EVP_sha256(), ...)
 * would look the algorithm up in libcrypto's provider store on every
 * iteration, under a process-wide read-write lock: on 2 workers that lock
 * was most of the handler's time, and made the in-process hash slower than
 * the same handler alone in an isolated runner (docs/plugins.md, "A handler
 * call"; docs/benchmarks.md). */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tpool/plugin.h>

static const tpool_host_api* host;

typedef struct hash_ctx {
  unsigned long long max_iterations;
  EVP_MD* sha256; /* fetched once by init, freed by fini; shared by every call */
} hash_ctx;

/* picked by hand: about 1 ms of SHA-256 work between cancellation checks. */
#define HASH_CHECK_EVERY 4096ULL
#define HASH_DEFAULT_MAX 10000000ULL

static int32_t hash_init(const tpool_host_api* h, const char* config, void** plugin_ctx,
                         char* error, size_t error_size) {
  hash_ctx* ctx = (hash_ctx*)malloc(sizeof *ctx);
  (void)h;
  if (ctx == NULL) {
    snprintf(error, error_size, "hash: out of memory allocating the plugin context");
    return TPOOL_STATUS_INTERNAL;
  }
  ctx->max_iterations = HASH_DEFAULT_MAX;
  ctx->sha256 = NULL;
  if (config[0] != '\0') {
    char* end = NULL;
    const char* key = "max_iterations=";
    if (strncmp(config, key, strlen(key)) != 0 || config[strlen(key)] < '0' ||
        config[strlen(key)] > '9') {
      snprintf(error, error_size,
               "hash: config string \"%.200s\" is not understood: use \"max_iterations=<n>\" "
               "with n >= 1, or no config",
               config);
      free(ctx);
      return TPOOL_STATUS_INVALID_INPUT;
    }
    ctx->max_iterations = strtoull(config + strlen(key), &end, 10);
    if (*end != '\0' || ctx->max_iterations == 0) {
      snprintf(error, error_size, "hash: max_iterations in \"%.200s\" must be a whole number >= 1",
               config);
      free(ctx);
      return TPOOL_STATUS_INVALID_INPUT;
    }
  }
  ctx->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
  if (ctx->sha256 == NULL) {
    snprintf(error, error_size,
             "hash: libcrypto has no SHA256 digest (EVP_MD_fetch failed): check the OpenSSL "
             "configuration (OPENSSL_CONF) and that the default provider is available");
    free(ctx);
    return TPOOL_STATUS_INTERNAL;
  }
  *plugin_ctx = ctx;
  return TPOOL_STATUS_OK;
}

static void hash_fini(void* plugin_ctx) {
  hash_ctx* ctx = (hash_ctx*)plugin_ctx;
  EVP_MD_free(ctx->sha256);
  free(ctx);
}

/* One SHA-256 of data into digest, on md (initialised for ctx->sha256). */
static int digest_once(EVP_MD_CTX* md, const hash_ctx* ctx, const void* data, size_t size,
                       unsigned char* digest, unsigned int* digest_len) {
  return EVP_DigestInit_ex2(md, ctx->sha256, NULL) && EVP_DigestUpdate(md, data, size) &&
         EVP_DigestFinal_ex(md, digest, digest_len);
}

static int32_t hash_call(void* plugin_ctx, tpool_job* job, const uint8_t* input,
                         size_t input_size) {
  const hash_ctx* ctx = (const hash_ctx*)plugin_ctx;
  unsigned long long n = 0, i;
  size_t colon = 0;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  char message[256];
  char* out;
  EVP_MD_CTX* md;
  int ok;
  static const char hex[] = "0123456789abcdef";

  while (colon < input_size && colon < 20 && input[colon] >= '0' && input[colon] <= '9') {
    n = n * 10 + (unsigned long long)(input[colon] - '0');
    ++colon;
  }
  if (colon == 0 || colon >= input_size || input[colon] != ':' || n == 0 ||
      n > ctx->max_iterations) {
    snprintf(message, sizeof message,
             "hash: the input must be \"<n>:<payload>\" with n from 1 to %llu, e.g. \"1:abc\"",
             ctx->max_iterations);
    host->set_message(job, message);
    return TPOOL_STATUS_INVALID_INPUT;
  }
  md = EVP_MD_CTX_new();
  if (md == NULL) {
    host->set_message(job, "hash: out of memory allocating a digest context");
    return TPOOL_STATUS_INTERNAL;
  }
  ok = digest_once(md, ctx, input + colon + 1, input_size - colon - 1, digest, &digest_len);
  for (i = 1; ok && i < n; ++i) {
    if (i % HASH_CHECK_EVERY == 0 && host->is_cancelled(job)) {
      EVP_MD_CTX_free(md);
      snprintf(message, sizeof message, "hash: cancelled after %llu of %llu iterations", i, n);
      host->set_message(job, message);
      return host->remaining_ns(job) == 0 ? TPOOL_STATUS_DEADLINE_EXCEEDED : TPOOL_STATUS_CANCELLED;
    }
    ok = digest_once(md, ctx, digest, digest_len, digest, &digest_len);
  }
  EVP_MD_CTX_free(md);
  if (!ok) {
    host->set_message(job, "hash: libcrypto's SHA-256 digest failed");
    return TPOOL_STATUS_INTERNAL;
  }
  out = (char*)host->output_reserve(job, 2 * (size_t)digest_len);
  if (out == NULL) return TPOOL_STATUS_OUTPUT_TOO_LARGE;
  for (i = 0; i < digest_len; ++i) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  return TPOOL_STATUS_OK;
}

static const tpool_handler handlers[] = {
    {"hash",
     "Input \"<n>:<payload>\": SHA-256 of payload iterated n times, as 64 hex digits (CPU work).",
     TPOOL_LANE_DEFAULT, 0, 0, hash_call},
};

static const tpool_plugin plugin = {
    TPOOL_PLUGIN_HEADER, "hash",    "1.0.0", "Hash: iterated SHA-256 with libcrypto.", handlers, 1,
    hash_init,           hash_fini,
};

TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const tpool_host_api* h) {
  host = h;
  return &plugin;
}
