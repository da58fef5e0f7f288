/* CRC-32C (Castagnoli), as Kafka's record batch CRC: the SSE4.2 instruction where the CPU has it,
 * a table otherwise. Included by the C extensions that build or check batches (each gets its own
 * static copy); call crc_init() once from the module's init function. */
#ifndef RDMALOG_CRC32C_H
#define RDMALOG_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t crc_table[256];
static int crc_hw;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *p,
                                                           size_t n) {
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = (uint32_t)__builtin_ia32_crc32di(c, v);
    }
    for (; n; n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

static uint32_t crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
#if defined(__x86_64__) && defined(__GNUC__)
    if (crc_hw) return ~crc_sse42(c, p, n);
#endif
    for (; n; n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

#endif
