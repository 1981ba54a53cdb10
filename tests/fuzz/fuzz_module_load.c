/*
 * fuzz_module_load.c -- libFuzzer target for the Redis module's rdb_load
 * (src/module/module.c's type_load), fed through a fake RedisModuleIO that
 * reads the input as Redis hands a module its part of a value: each field
 * an opcode (2: unsigned, 5: string) and the value, in Redis's length
 * encoding (6, 14, 32 or 64 bits), a read past the end or of the wrong
 * kind setting the IO's error flag (REDISMODULE_OPTIONS_HANDLE_IO_ERRORS).
 * A real DUMP's bytes after the module id are an input (the seeds are).
 * module.c is included whole, its statics reached from here; the API's
 * function pointers are set to the fakes below.  Checks the promises:
 *
 *   - a load that met an IO error returns no value;
 *   - a value holds 1 to SL_ALGO_COUNT records, each answering RL.PEEK's
 *     question within SPEC section 3's ranges;
 *   - what type_save writes of it loads again and saves to the same bytes;
 *   - a refused value leaks nothing (LeakSanitizer).
 */
#include <stdlib.h>
#include <string.h>

#include "module.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct RedisModuleIO {
    const uint8_t *p; /* reading: the input */
    size_t n, pos;
    int error;
    uint8_t *out; /* writing (type_save): a growing buffer */
    size_t olen, ocap;
};

static int rd_len(RedisModuleIO *io, uint64_t *v)
{
    if (io->pos >= io->n) return -1;
    uint8_t b = io->p[io->pos++];
    size_t k;
    switch (b >> 6) {
    case 0: *v = b & 0x3f; return 0;
    case 1:
        if (io->pos >= io->n) return -1;
        *v = (uint64_t)(b & 0x3f) << 8 | io->p[io->pos++];
        return 0;
    case 2:
        k = b == 0x80 ? 4 : b == 0x81 ? 8 : 0;
        if (k == 0 || io->n - io->pos < k) return -1;
        *v = 0;
        for (size_t i = 0; i < k; i++) *v = *v << 8 | io->p[io->pos++];
        return 0;
    default: return -1; /* Redis's integer and LZF encodings: not in these seeds */
    }
}

static uint64_t fake_load_unsigned(RedisModuleIO *io)
{
    uint64_t op, v;
    if (io->error || rd_len(io, &op) != 0 || op != 2 || rd_len(io, &v) != 0) {
        io->error = 1;
        return 0;
    }
    return v;
}

static char *fake_load_string_buffer(RedisModuleIO *io, size_t *lenptr)
{
    uint64_t op, len;
    if (io->error || rd_len(io, &op) != 0 || op != 5 || rd_len(io, &len) != 0 ||
        len > io->n - io->pos) {
        io->error = 1;
        return NULL;
    }
    char *s = malloc(len ? len : 1);
    if (s == NULL) abort();
    memcpy(s, io->p + io->pos, len);
    io->pos += len;
    *lenptr = len;
    return s;
}

static void wr(RedisModuleIO *io, const void *src, size_t len)
{
    if (io->ocap - io->olen < len) {
        io->ocap = (io->olen + len) * 2;
        if ((io->out = realloc(io->out, io->ocap)) == NULL) abort();
    }
    memcpy(io->out + io->olen, src, len);
    io->olen += len;
}

static void wr_len(RedisModuleIO *io, uint64_t v)
{
    uint8_t b[9];
    if (v < 64) {
        b[0] = (uint8_t)v;
        wr(io, b, 1);
    } else if (v < 16384) {
        b[0] = (uint8_t)(0x40 | v >> 8);
        b[1] = (uint8_t)v;
        wr(io, b, 2);
    } else {
        b[0] = 0x81;
        for (int i = 0; i < 8; i++) b[1 + i] = (uint8_t)(v >> (56 - 8 * i));
        wr(io, b, 9);
    }
}

static void fake_save_unsigned(RedisModuleIO *io, uint64_t v)
{
    wr_len(io, 2);
    wr_len(io, v);
}

static void fake_save_string_buffer(RedisModuleIO *io, const char *s, size_t len)
{
    wr_len(io, 5);
    wr_len(io, len);
    wr(io, s, len);
}

static int fake_is_io_error(RedisModuleIO *io) { return io->error; }

static void fake_log_io_error(RedisModuleIO *io, const char *level, const char *fmt, ...)
{
    (void)io, (void)level, (void)fmt;
}

static RedisModuleCtx *fake_ctx_from_io(RedisModuleIO *io)
{
    (void)io;
    return NULL;
}

static int fake_context_flags(RedisModuleCtx *ctx)
{
    (void)ctx;
    return 0;
}

static void setup(void)
{
    RedisModule_LoadUnsigned = fake_load_unsigned;
    RedisModule_LoadStringBuffer = fake_load_string_buffer;
    RedisModule_SaveUnsigned = fake_save_unsigned;
    RedisModule_SaveStringBuffer = fake_save_string_buffer;
    RedisModule_IsIOError = fake_is_io_error;
    RedisModule_LogIOError = fake_log_io_error;
    RedisModule_GetContextFromIO = fake_ctx_from_io;
    RedisModule_GetContextFlags = fake_context_flags;
    RedisModule_Alloc = malloc;
    RedisModule_Calloc = calloc;
    RedisModule_Free = free;
    mod.max_memory = 1ULL << 20; /* a bound of 16 kB a key: reachable by inputs */
    if ((mod.loose = sl__shard_loose_new(mod.max_memory)) == NULL) abort();
}

/* RL.PEEK key 5 1h ALGO a on each record: SPEC section 3's ranges. */
static void check_records(const rlval *v)
{
    int n = 0;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        uint8_t *rec = val_rec(v, a);
        if (rec == NULL) continue;
        n++;
        if ((int)sl__lone_algo(rec) != a) abort();
        sl_params p = SL_PARAMS_INIT;
        p.algo = (sl_algo)a;
        p.limit = 5;
        p.window_ms = 3600000;
        sl_result r;
        uint8_t *peek = rec;
        if (sl__lone_decide(mod.loose, &peek, NULL, &p, 1800000000000LL, 1, 0, &r) != 0) continue;
        if (peek != rec) abort(); /* a peek moves nothing */
        if ((r.allowed != 0 && r.allowed != 1) || r.limit != 5 || r.remaining < 0 ||
            r.remaining > 5 || (r.allowed ? r.retry_after_ms != 0 : r.retry_after_ms < 1) ||
            r.reset_after_ms < 0 || r.delay_ms < 0)
            abort();
    }
    if (n < 1) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        setup();
        ready = 1;
    }
    RedisModuleIO in = {.p = data, .n = size};
    rlval *v = type_load(&in, TYPE_ENCVER);
    if (v == NULL) return 0;
    if (in.error) abort();
    check_records(v);
    if (type_mem(v) < sizeof *v) abort();
    RedisModuleIO out1 = {0}, out2 = {0};
    type_save(&out1, v);
    RedisModuleIO again = {.p = out1.out, .n = out1.olen};
    rlval *w = type_load(&again, TYPE_ENCVER);
    if (w == NULL || again.error || again.pos != again.n) abort();
    type_save(&out2, w);
    if (out2.olen != out1.olen || memcmp(out1.out, out2.out, out1.olen) != 0) abort();
    val_free(w);
    val_free(v);
    free(out1.out);
    free(out2.out);
    return 0;
}
