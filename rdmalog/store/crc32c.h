/* CRC-32C (Castagnoli), as Kafka's record batch CRC: the SSE4.2 instruction where the CPU has it,
 * a table otherwise. Included by the C extensions that build or check batches (each gets its own
 * static copy); call crc_init() once from the module's init function.
 *
 * One `crc32` instruction stream is bound by its 3-cycle latency, while the CPU can start one per
 * cycle. So long buffers run three independent streams over three adjacent blocks of a fixed
 * length L and join them: a CRC is linear, so the CRC of A then B is the CRC of A moved past |B|
 * zero bytes, xor the CRC of B started at zero. Moving a CRC past L zero bytes is multiplying it
 * by x^(8L) modulo the polynomial; crc_init() tabulates that product per byte of the CRC (as
 * Intel's "Fast CRC Computation for iSCSI Polynomial Using CRC32 Instruction" describes). */
#ifndef RDMALOG_CRC32C_H
#define RDMALOG_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CRC_POLY 0x82F63B78u /* reflected: bit 31 is x^0, bit 0 is x^31 */

static uint32_t crc_table[256];
static int crc_hw;

#if defined(__x86_64__) && defined(__GNUC__)
/* Block lengths of the three streams (multiples of 8): long blocks for the bulk, short ones for
 * what is left, and one stream below 3 short blocks, where joining would cost more than it saves. */
#define CRC_LONG 2048
#define CRC_SHORT 256
/* crc_shift_*[k][b]: the byte b at byte position k of a CRC, moved past CRC_* zero bytes */
static uint32_t crc_shift_long[4][256], crc_shift_short[4][256];

/* a * b modulo the polynomial, both reflected */
static uint32_t crc_mulmod(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (int bit = 31; bit >= 0; bit--) { /* bit 31 - i of a is the coefficient of x^i */
        if (a >> bit & 1) product ^= b;
        b = b & 1 ? (b >> 1) ^ CRC_POLY : b >> 1; /* b *= x */
    }
    return product;
}

static void crc_shift_init(uint32_t table[4][256], size_t zero_bytes) {
    uint32_t x_power = 0x80000000u; /* x^0, times x once per zero bit */
    for (size_t i = 0; i < 8 * zero_bytes; i++)
        x_power = x_power & 1 ? (x_power >> 1) ^ CRC_POLY : x_power >> 1;
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) table[k][b] = crc_mulmod(x_power, b << (8 * k));
}

static inline uint32_t crc_shift(uint32_t table[4][256], uint32_t c) {
    return table[0][c & 0xFF] ^ table[1][c >> 8 & 0xFF] ^ table[2][c >> 16 & 0xFF] ^
           table[3][c >> 24];
}

static inline uint64_t crc_load8(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* CRC c continued over n = 3 * block * count bytes: three streams of `block` bytes at a time */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42_3way(uint32_t c, const unsigned char *p,
                                                                size_t block, size_t count,
                                                                uint32_t shift[4][256]) {
    for (; count; count--, p += 3 * block) {
        uint64_t c0 = c, c1 = 0, c2 = 0;
        for (size_t i = 0; i < block; i += 8) {
            c0 = __builtin_ia32_crc32di(c0, crc_load8(p + i));
            c1 = __builtin_ia32_crc32di(c1, crc_load8(p + block + i));
            c2 = __builtin_ia32_crc32di(c2, crc_load8(p + 2 * block + i));
        }
        c = crc_shift(shift, crc_shift(shift, (uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
    }
    return c;
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *p,
                                                           size_t n) {
    if (n >= 3 * CRC_SHORT) {
        size_t count = n / (3 * CRC_LONG);
        c = crc_sse42_3way(c, p, CRC_LONG, count, crc_shift_long);
        p += 3 * CRC_LONG * count, n -= 3 * CRC_LONG * count;
        count = n / (3 * CRC_SHORT);
        c = crc_sse42_3way(c, p, CRC_SHORT, count, crc_shift_short);
        p += 3 * CRC_SHORT * count, n -= 3 * CRC_SHORT * count;
    }
    for (; n >= 8; p += 8, n -= 8) c = (uint32_t)__builtin_ia32_crc32di(c, crc_load8(p));
    for (; n; n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC_POLY : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
    if (crc_hw) {
        crc_shift_init(crc_shift_long, CRC_LONG);
        crc_shift_init(crc_shift_short, CRC_SHORT);
    }
#endif
}

static uint32_t crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
#if defined(__x86_64__) && defined(__GNUC__)
    if (crc_hw) return ~crc_sse42(c, p, n);
#endif
    for (; n; n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

#endif
