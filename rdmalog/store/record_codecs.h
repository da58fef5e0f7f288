/* The codecs of the store's record check (_records.c): compressed records inflated piece by piece
 * into reused buffers and fed to the record scanner as they come, never held whole nor re-encoded:
 * gzip (zlib) always, lz4 (frame format), zstd (streamed frames) and snappy (raw or xerial-framed)
 * when setup.py found their libraries (HAVE_LZ4 / HAVE_ZSTD / HAVE_SNAPPY); a lone zstd frame, a
 * snappy block and (HAVE_LIBDEFLATE) a one-member gzip batch inflate whole. Included once, by
 * _records.c, after record_scan.h and the codec numbers. */
#ifndef RDMALOG_RECORD_CODECS_H
#define RDMALOG_RECORD_CODECS_H

#include <zlib.h>
#ifdef HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif
#ifdef HAVE_LZ4
#include <lz4frame.h>
#endif
#ifdef HAVE_ZSTD
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_getFrameHeader: a frame's window before decoding it */
#include <zstd.h>
#endif
#ifdef HAVE_SNAPPY
#include <snappy-c.h>
#endif

/* The decompression buffers, reused from call to call (every call holds the GIL): `piece` for the
 * streamed codecs, `whole` for a raw snappy block or a zstd frame of known size inflated at once
 * (grown up to the call's bound, given back past WHOLE_KEPT), and the lz4 / zstd contexts. */
static unsigned char *piece;
static unsigned char *whole;
static size_t whole_cap;

/* `whole` of at least `want` bytes: -1 when that cannot be had. */
static int whole_for(size_t want) {
    if (want > whole_cap) {
        unsigned char *b = PyMem_Realloc(whole, want);
        if (!b) return -1;
        whole = b;
        whole_cap = want;
    }
    return 0;
}
/* `whole` given back when a call grew it past WHOLE_KEPT */
static void whole_trim(void) {
    if (whole_cap > WHOLE_KEPT) {
        PyMem_Free(whole);
        whole = NULL;
        whole_cap = 0;
    }
}
#ifdef HAVE_LZ4
static LZ4F_dctx *lz4_ctx;
#endif
#ifdef HAVE_ZSTD
static ZSTD_DCtx *zstd_ctx;
#endif

static inline uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* The scanner fed one decompressed piece: -1 (error cleared: Python names it) on a bad record. */
static inline int feed(RecordScan *s, const unsigned char *p, const unsigned char *end) {
    if (p < end && scan(s, p, end) < 0) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Scan the records of a gzip records section as they inflate, as compression.decompress_chunks
 * reads it: gzip or zlib streams (auto-detected, wbits 47), concatenated members one after the
 * other, every member complete and nothing after the last. 0 when every byte inflated and scanned
 * (the caller asks scan_complete), -1 otherwise (the Python check then names the error). */
static int zlib_scan(RecordScan *s, const unsigned char *in, Py_ssize_t len, unsigned char *out) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 47) != Z_OK) return -1;
    zs.next_in = (unsigned char *)in;
    zs.avail_in = (uInt)len; /* a batch is under 2 GiB */
    int ok = -1;
    for (;;) {
        zs.next_out = out;
        zs.avail_out = INFLATE_PIECE;
        int rc = inflate(&zs, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END) break; /* corrupt or truncated */
        if (feed(s, out, zs.next_out) < 0) break;
        if (rc == Z_STREAM_END) {
            if (zs.avail_in == 0) {
                ok = 0;
                break;
            }
            if (inflateReset(&zs) != Z_OK) break; /* the next member */
        }
    }
    inflateEnd(&zs);
    return ok;
}

#ifdef HAVE_LIBDEFLATE
static struct libdeflate_decompressor *deflate_ctx;

/* The common gzip form (librdkafka's, the Java client's: one member, no optional header fields)
 * inflated whole by libdeflate, about 2.5x zlib here (zlib's CRC-32 alone is half of its time):
 * 1 when it inflated and was scanned, 0 when libdeflate does not take it (another form, a size
 * past `limit`, corrupt data: zlib_scan then decides, so verdicts stay zlib's), -1 on a bad
 * record. */
static int deflate_scan(RecordScan *s, const unsigned char *in, Py_ssize_t len, size_t limit) {
    /* magic, deflate, FLG 0 (an FHCRC header CRC is checked by zlib, not by libdeflate) */
    if (len < 18 || in[0] != 0x1f || in[1] != 0x8b || in[2] != 8 || in[3] != 0) return 0;
    size_t isize = (size_t)in[len - 4] | (size_t)in[len - 3] << 8 | (size_t)in[len - 2] << 16 |
                   (size_t)in[len - 1] << 24; /* the member's size, if it is the only one */
    if (isize == 0 || isize > limit || whole_for(isize) < 0) return 0;
    if (!deflate_ctx && !(deflate_ctx = libdeflate_alloc_decompressor())) return 0;
    size_t used = 0, got = 0;
    if (libdeflate_gzip_decompress_ex(deflate_ctx, in, (size_t)len, whole, isize, &used, &got) !=
            LIBDEFLATE_SUCCESS ||
        used != (size_t)len || got != isize)
        return 0; /* more members, trailing bytes, a size that lies, corrupt data */
    return feed(s, whole, whole + got) < 0 ? -1 : 1;
}
#endif

/* A gzip records section: libdeflate when it takes the form, zlib streamed otherwise. 0 or -1. */
static int inflate_scan(RecordScan *s, const unsigned char *in, Py_ssize_t len, size_t limit) {
#ifdef HAVE_LIBDEFLATE
    int r = deflate_scan(s, in, len, limit);
    whole_trim();
    if (r) return r > 0 ? 0 : -1;
#endif
    (void)limit;
    if (!piece && !(piece = PyMem_Malloc(INFLATE_PIECE))) return -1;
    return zlib_scan(s, in, len, piece);
}

#ifdef HAVE_LZ4
/* lz4 frames (Kafka's format since magic 1 is the standard frame) one after the other, each
 * complete, nothing after the last: as compression._unlz4_chunks reads them. 0 or -1 as above. */
static int lz4_scan(RecordScan *s, const unsigned char *in, Py_ssize_t len, unsigned char *out) {
    if (!lz4_ctx && LZ4F_isError(LZ4F_createDecompressionContext(&lz4_ctx, LZ4F_VERSION))) {
        lz4_ctx = NULL;
        return -1;
    }
    const unsigned char *p = in, *end = in + len;
    size_t hint = 0; /* 0: between frames */
    int pending = 0; /* the output was full mid-frame: more may come without input */
    while (p < end || pending) {
        size_t out_n = INFLATE_PIECE, in_n = (size_t)(end - p);
        hint = LZ4F_decompress(lz4_ctx, out, &out_n, p, &in_n, NULL);
        if (LZ4F_isError(hint) || feed(s, out, out + out_n) < 0) {
            LZ4F_resetDecompressionContext(lz4_ctx); /* corrupt data or a bad record */
            return -1;
        }
        p += in_n;
        pending = out_n == INFLATE_PIECE && hint != 0;
    }
    if (hint == 0) return 0;
    LZ4F_resetDecompressionContext(lz4_ctx); /* a truncated frame */
    return -1;
}
#endif

#ifdef HAVE_ZSTD
/* zstd frames one after the other (streamed: Kafka's may not carry their content size), each
 * complete, nothing after the last. 0 or -1 as above. */
static int zstd_scan(RecordScan *s, const unsigned char *in, Py_ssize_t len, unsigned char *out) {
    if (!zstd_ctx) {
        if (!(zstd_ctx = ZSTD_createDCtx())) return -1;
        /* a window past 8 MiB (Kafka's clients use 2 MiB or less) is left to Python: the reused
         * context would keep its memory */
        ZSTD_DCtx_setParameter(zstd_ctx, ZSTD_d_windowLogMax, 23);
    }
    ZSTD_DCtx_reset(zstd_ctx, ZSTD_reset_session_only);
    /* one frame, its window within the streamed path's limit: decoded at once straight into
     * `whole` (no copy out of zstd's window buffer, which streaming makes of every byte), at its
     * content size when it says it (the Python clients' and the store's own encoder's) or into
     * WHOLE_KEPT bytes when not (librdkafka's, the Java client's); a frame that does not fit or
     * fails is streamed, which decides as before */
    ZSTD_frameHeader fh;
    if (ZSTD_getFrameHeader(&fh, in, (size_t)len) == 0 && fh.frameType == ZSTD_frame &&
        fh.windowSize <= (1ULL << 23) && fh.frameContentSize != 0 &&
        (fh.frameContentSize <= WHOLE_KEPT || fh.frameContentSize == ZSTD_CONTENTSIZE_UNKNOWN) &&
        ZSTD_findFrameCompressedSize(in, (size_t)len) == (size_t)len) {
        int sized = fh.frameContentSize != ZSTD_CONTENTSIZE_UNKNOWN;
        size_t cap = sized ? (size_t)fh.frameContentSize : WHOLE_KEPT;
        if (whole_for(cap) < 0) return -1;
        size_t got = ZSTD_decompressDCtx(zstd_ctx, whole, cap, in, (size_t)len);
        if (!ZSTD_isError(got) && (got == cap || !sized))
            return feed(s, whole, whole + got);
        ZSTD_DCtx_reset(zstd_ctx, ZSTD_reset_session_only);
    }
    ZSTD_inBuffer ib = {in, (size_t)len, 0};
    size_t ret = 0; /* 0: between frames */
    for (;;) {
        ZSTD_outBuffer ob = {out, INFLATE_PIECE, 0};
        if (ib.pos == ib.size && ret == 0) return 0;
        ret = ZSTD_decompressStream(zstd_ctx, &ob, &ib); /* the next call resets the context */
        if (ZSTD_isError(ret) || feed(s, out, out + ob.pos) < 0) return -1;
        if (ib.pos == ib.size && ret != 0 && ob.pos < ob.size) return -1; /* truncated */
    }
}
#endif

#ifdef HAVE_SNAPPY
/* One raw snappy block, inflated whole into `whole` (grown up to `limit` bytes; a block
 * that says it inflates past that is left to Python, which decompresses it as before). */
static int snappy_block(RecordScan *s, const char *in, size_t n, size_t limit) {
    size_t want;
    if (snappy_uncompressed_length(in, n, &want) != SNAPPY_OK || want > limit) return -1;
    if (whole_for(want) < 0) return -1;
    size_t got = whole_cap;
    if (snappy_uncompress(in, n, (char *)whole, &got) != SNAPPY_OK) return -1;
    return feed(s, whole, whole + got);
}

/* snappy as compression.decompress_pieces reads it: xerial-framed (magic, then (int32 length,
 * raw block) pairs after the 16-byte header) as the Java client writes it, or one raw block as
 * librdkafka may. 0 or -1 as above. */
static int snappy_scan(RecordScan *s, const unsigned char *in, Py_ssize_t len, size_t limit) {
    static const unsigned char magic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
    int r = 0;
    if (len < 8 || memcmp(in, magic, 8) != 0) {
        r = snappy_block(s, (const char *)in, (size_t)len, limit);
    } else {
        for (Py_ssize_t pos = 16; pos < len && r == 0;) {
            int32_t n = len - pos < 4 ? -1 : (int32_t)be(in + pos, 4);
            if (n < 0 || n > len - pos - 4) { /* a truncated block or block header */
                r = -1;
                break;
            }
            r = snappy_block(s, (const char *)in + pos + 4, (size_t)n, limit);
            pos += 4 + (Py_ssize_t)n;
        }
    }
    whole_trim(); /* a big block: its buffer is not kept */
    return r;
}
#endif

/* The codecs whose records validate_client checks itself (the others: a tuple, Python checks). */
static inline int checked_codec(int codec) {
    switch (codec) {
    case 0:
    case GZIP:
#ifdef HAVE_SNAPPY
    case SNAPPY:
#endif
#ifdef HAVE_LZ4
    case LZ4:
#endif
#ifdef HAVE_ZSTD
    case ZSTD:
#endif
        return 1;
    default:
        return 0;
    }
}

/* The records section of a checked codec fed to the scanner: 0 when every byte was decompressed
 * and scanned, -1 otherwise (a bad record, corrupt or truncated data, a raw snappy block past
 * `limit`: Python then names the error or, for that block, decompresses it as before). */
static int scan_section(RecordScan *s, int codec, const unsigned char *in, Py_ssize_t len,
                        size_t limit) {
    if (codec == 0) return feed(s, in, in + len);
    if (codec == GZIP) return inflate_scan(s, in, len, limit);
    if (codec == SNAPPY) {
#ifdef HAVE_SNAPPY
        return snappy_scan(s, in, len, limit);
#endif
    } else {
        if (!piece && !(piece = PyMem_Malloc(INFLATE_PIECE))) return -1;
#ifdef HAVE_LZ4
        if (codec == LZ4) return lz4_scan(s, in, len, piece);
#endif
#ifdef HAVE_ZSTD
        if (codec == ZSTD) return zstd_scan(s, in, len, piece);
#endif
    }
    (void)limit;
    return -1;
}

#endif
