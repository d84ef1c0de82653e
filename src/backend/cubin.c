/* cubin.c: a kernel's registers and stack frame from its cubin, and the module's global variables.
 *
 * A cubin is an ELF64 file. ptxas records per-kernel facts as attributes in the section .nv.info
 * (and .nv.info.<kernel>): each attribute starts with a 4-byte header, a format byte and an
 * attribute byte, then either a 16-bit value (formats 1 to 3) or a 16-bit size followed by that
 * many bytes (format 4). Two of them say what `ptxas -v` prints: attribute 0x2f, the register
 * count, and 0x11, the stack frame, each a format-4 payload of (symbol index, value) as two
 * little-endian 32-bit words, where the symbol is the kernel's entry in .symtab. A module's
 * __device__ variables live in the sections .nv.global (zero-initialised, no bytes in the file) and
 * .nv.global.init. Every offset read from the file is checked against its length. */
#include "cubin.h"

#include <string.h>

#define EI_FMT_SVAL 4
#define EI_ATTR_FRAME_SIZE 0x11
#define EI_ATTR_REGCOUNT 0x2f
#define SHT_SYMTAB 2
#define SHT_NOBITS 8

typedef struct {
    const unsigned char *b;
    size_t len;
} elf_bytes;

static int rd(const elf_bytes *e, uint64_t off, size_t n, void *out) {
    if (off > e->len || n > e->len - off)
        return -1;
    memcpy(out, e->b + off, n);
    return 0;
}

static uint16_t u16_at(const unsigned char *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t u32_at(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t u64_at(const unsigned char *p) {
    return (uint64_t)u32_at(p) | (uint64_t)u32_at(p + 4) << 32;
}

typedef struct {
    uint32_t name, type, link;
    uint64_t off, size, entsize;
    uint64_t mem_size; /* the size the section takes when loaded (NOBITS ones included) */
} elf_section;

static int section(const elf_bytes *e, uint64_t shoff, uint16_t shentsize, int i, elf_section *s) {
    unsigned char h[64];
    if (shentsize < 64 || rd(e, shoff + (uint64_t)i * shentsize, 64, h))
        return -1;
    *s = (elf_section){.name = u32_at(h),
                       .type = u32_at(h + 4),
                       .off = u64_at(h + 24),
                       .size = u64_at(h + 32),
                       .link = u32_at(h + 40),
                       .entsize = u64_at(h + 56),
                       .mem_size = u64_at(h + 32)};
    if (s->type == SHT_NOBITS)
        s->size = 0; /* .nv.shared.*: a size in shared memory, no bytes in the file */
    return s->off > e->len || s->size > e->len - s->off ? -1 : 0;
}

/* The NUL-terminated string at off in a string section, or NULL. */
static const char *str_at(const elf_bytes *e, const elf_section *strs, uint64_t off) {
    if (off >= strs->size)
        return NULL;
    const char *s = (const char *)e->b + strs->off + off;
    return memchr(s, 0, strs->size - off) ? s : NULL;
}

/* The header of a cubin: *shoff and friends, or -1 when the bytes are not a little-endian ELF64. */
static int elf_header(const elf_bytes *e, uint64_t *shoff, uint16_t *shentsize, uint16_t *shnum,
                      uint16_t *shstrndx) {
    unsigned char eh[64];
    if (!e->b || rd(e, 0, 64, eh) || memcmp(eh, "\177ELF", 4) || eh[4] != 2 || eh[5] != 1)
        return -1;
    *shoff = u64_at(eh + 0x28);
    *shentsize = u16_at(eh + 0x3a);
    *shnum = u16_at(eh + 0x3c);
    *shstrndx = u16_at(eh + 0x3e);
    return 0;
}

int kiln_cubin_global_bytes(const void *cubin, size_t len, uint64_t *bytes, kiln_err *err) {
    const elf_bytes e = {cubin, len};
    uint64_t shoff;
    uint16_t shentsize, shnum, shstrndx;
    elf_section names;
    if (elf_header(&e, &shoff, &shentsize, &shnum, &shstrndx))
        return kiln_errf(err, KILN_ERR_FORMAT, "not a cubin: no little-endian ELF64 header");
    if (shstrndx >= shnum || section(&e, shoff, shentsize, shstrndx, &names))
        return kiln_errf(err, KILN_ERR_FORMAT, "cubin: bad section header table");
    *bytes = 0;
    for (int i = 0; i < shnum; i++) {
        elf_section s;
        if (section(&e, shoff, shentsize, i, &s))
            return kiln_errf(err, KILN_ERR_FORMAT, "cubin: section %d lies outside the file", i);
        const char *nm = str_at(&e, &names, s.name);
        if (nm && strncmp(nm, ".nv.global", 10) == 0)
            *bytes += s.mem_size;
    }
    return 0;
}

/* The index in .symtab of the symbol called name (*shndx: its section, 0 when undefined), -1 when
 * there is none, -2 when a section lies outside the file. */
static int64_t symbol_index(const elf_bytes *e, uint64_t shoff, uint16_t shentsize, uint16_t shnum,
                            const char *name, uint16_t *shndx) {
    for (int i = 0; i < shnum; i++) {
        elf_section symtab, strtab;
        if (section(e, shoff, shentsize, i, &symtab))
            return -2;
        if (symtab.type != SHT_SYMTAB || symtab.entsize < 24 || symtab.link >= shnum ||
            section(e, shoff, shentsize, (int)symtab.link, &strtab))
            continue;
        for (uint64_t k = 0; k < symtab.size / symtab.entsize; k++) {
            const unsigned char *ent = e->b + symtab.off + k * symtab.entsize;
            const char *nm = str_at(e, &strtab, u32_at(ent));
            if (nm && strcmp(nm, name) == 0) {
                *shndx = u16_at(ent + 6); /* Elf64_Sym: st_name, st_info, st_other, st_shndx */
                return (int64_t)k;
            }
        }
    }
    return -1;
}

int kiln_cubin_undefined(const void *cubin, size_t len, const char *name, int *undefined,
                         kiln_err *err) {
    const elf_bytes e = {cubin, len};
    uint64_t shoff;
    uint16_t shentsize, shnum, shstrndx, shndx = 0;
    if (elf_header(&e, &shoff, &shentsize, &shnum, &shstrndx))
        return kiln_errf(err, KILN_ERR_FORMAT, "not a cubin: no little-endian ELF64 header");
    int64_t sym = symbol_index(&e, shoff, shentsize, shnum, name, &shndx);
    if (sym == -2)
        return kiln_errf(err, KILN_ERR_FORMAT, "cubin: a section lies outside the file");
    *undefined = sym >= 0 && shndx == 0;
    return 0;
}

int kiln_cubin_usage_of(const void *cubin, size_t len, const char *name, kiln_cubin_usage *out,
                        kiln_err *err) {
    const elf_bytes e = {cubin, len};
    uint64_t shoff;
    uint16_t shentsize, shnum, shstrndx, shndx;
    if (elf_header(&e, &shoff, &shentsize, &shnum, &shstrndx))
        return kiln_errf(err, KILN_ERR_FORMAT, "not a cubin: no little-endian ELF64 header");
    elf_section names;
    if (shstrndx >= shnum || section(&e, shoff, shentsize, shstrndx, &names))
        return kiln_errf(err, KILN_ERR_FORMAT, "cubin: bad section header table");
    int64_t sym = symbol_index(&e, shoff, shentsize, shnum, name, &shndx);
    if (sym == -2)
        return kiln_errf(err, KILN_ERR_FORMAT, "cubin: a section lies outside the file");
    if (sym < 0)
        return kiln_errf(err, KILN_ERR_FORMAT, "cubin: no symbol named %s", name);
    int regs = -1;
    int64_t frame = 0;
    for (int i = 0; i < shnum; i++) {
        elf_section s;
        if (section(&e, shoff, shentsize, i, &s))
            return kiln_errf(err, KILN_ERR_FORMAT, "cubin: section %d lies outside the file", i);
        const char *nm = str_at(&e, &names, s.name);
        if (!nm || strncmp(nm, ".nv.info", 8) != 0)
            continue;
        for (uint64_t at = 0; at + 4 <= s.size;) {
            const unsigned char *a = e.b + s.off + at;
            uint64_t payload = a[0] == EI_FMT_SVAL ? u16_at(a + 2) : 0;
            if (payload > s.size - at - 4)
                break; /* a truncated attribute: the rest of the section is not trusted */
            if (a[0] == EI_FMT_SVAL && payload >= 8 && u32_at(a + 4) == (uint32_t)sym) {
                if (a[1] == EI_ATTR_REGCOUNT && u32_at(a + 8) <= 255) /* sm_90 allows 255 */
                    regs = (int)u32_at(a + 8);
                else if (a[1] == EI_ATTR_FRAME_SIZE)
                    frame = u32_at(a + 8);
            }
            at += 4 + payload;
        }
    }
    if (regs < 0)
        return kiln_errf(err, KILN_ERR_FORMAT, "cubin: no register count for %s", name);
    out->regs = regs;
    out->frame_bytes = frame;
    return 0;
}
