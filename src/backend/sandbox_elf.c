/* sandbox_elf.c: refuses a compiled cpu candidate that holds code the dynamic loader would run by
 * itself — constructors, init functions, IFUNC resolvers, destructors.
 *
 * The sandbox's runner loads a candidate before it installs its seccomp filter (loading needs the
 * file), so anything that runs inside dlopen runs unfiltered. The loader runs code of a shared
 * object in exactly these places, all named by its dynamic section: DT_INIT, DT_INIT_ARRAY and
 * DT_PREINIT_ARRAY at load, DT_FINI and DT_FINI_ARRAY at unload or exit, and the resolver of an
 * IFUNC whenever a relocation binds to one (an R_*_IRELATIVE relocation, or a symbol relocation
 * against an STT_GNU_IFUNC symbol the object defines). This file reads that section the way the
 * loader does (through the program headers, not the section table) and refuses the object when
 * any of them is there. Candidates are linked with -nostartfiles, so crtbegin's frame_dummy and
 * __do_global_dtors_aux do not put entries there for them; destructors are refused too, because a
 * proven library is later loaded into the user's own process by libkiln_rt. Thread-local variables
 * are refused too: the runner puts the candidate's static data back after every call
 * (sandbox_main.c), so that nothing a call leaves there reaches the next, and a thread's own
 * storage would escape that.
 *
 * For the same reason a candidate may call only functions that keep nothing for it from one call
 * to the next (import_refused): the math library (libm and its vector twin libmvec, less its
 * floating-point environment and signgam), OpenMP's parallel regions and queries (not its
 * setters, allocators or locks), the heap functions the runner defines itself (a heap of the
 * call's own), memcpy and its kin, abort and assert, and printing. The rest of the C library —
 * glibc's own heap, the environment, errno, rand's seed, the file positions, the dynamic loader
 * (dlsym would reach all of them) — is state a later call could find again, and the runner cannot
 * put it back. */
#include "sandbox.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const unsigned char *data;
    size_t len;
    const Elf64_Phdr *ph;
    int n_ph;
} elf_image;

/* The file offset of n bytes at virtual address va, or (size_t)-1 when no loaded segment holds
 * them in the file. */
static size_t elf_offset(const elf_image *img, uint64_t va, uint64_t n) {
    for (int i = 0; i < img->n_ph; i++) {
        const Elf64_Phdr *p = &img->ph[i];
        if (p->p_type != PT_LOAD || va < p->p_vaddr || va - p->p_vaddr > p->p_filesz ||
            n > p->p_filesz - (va - p->p_vaddr))
            continue;
        uint64_t off = p->p_offset + (va - p->p_vaddr);
        if (off > img->len || n > img->len - off)
            return (size_t)-1;
        return (size_t)off;
    }
    return (size_t)-1;
}

/* The relocation type that calls an IFUNC resolver on this machine (0: unknown machine). */
static uint32_t irelative_type(int machine) {
    switch (machine) {
    case EM_X86_64:
        return R_X86_64_IRELATIVE;
    case EM_AARCH64:
        return R_AARCH64_IRELATIVE;
    default:
        return 0;
    }
}

typedef struct {
    uint64_t symtab, strtab, strsz;
} elf_symbols;

/* The name of dynamic symbol i, or "?" where the tables do not say. */
static const char *sym_name(const elf_image *img, const elf_symbols *syms, const Elf64_Sym *s) {
    size_t off = elf_offset(img, syms->strtab, syms->strsz);
    if (off == (size_t)-1 || s->st_name >= syms->strsz)
        return "?";
    const char *name = (const char *)img->data + off + s->st_name;
    return memchr(name, 0, syms->strsz - s->st_name) ? name : "?";
}

/* What the C library holds that a candidate may call besides the math library: the heap functions
 * the runner defines itself (a heap of the call's own, emptied after it: sandbox_main.c), the
 * clock, copies and compares, stopping, printing (the runner flushes stdout after every call), and
 * the classification functions glibc keeps in libc rather than libm. */
static const char *const libc_allowed[] = {
    "malloc",           "calloc",       "realloc",       "aligned_alloc",
    "posix_memalign",   "free",         "clock_gettime", "nanosleep",
    "memcpy",           "memmove",      "memset",        "memcmp",
    "memchr",           "__memcpy_chk", "__memmove_chk", "__memset_chk",
    "__stack_chk_fail", "abort",        "__assert_fail", "printf",
    "__printf_chk",     "puts",         "putchar",       "fprintf",
    "__fprintf_chk",    "fputs",        "fputc",         "fwrite",
    "fflush",           "stdout",       "stderr",        "isnan",
    "isnanf",           "isinf",        "isinff",        "finite",
    "finitef",          "__isnan",      "__isnanf",      "__isinf",
    "__isinff",         "__finite",     "__finitef",     "__fpclassify",
    "__fpclassifyf",    "__signbit",    "__signbitf"};

/* OpenMP: its parallel regions, loops, barriers and sections (GOMP_*, the calls the compiler
 * emits), less the allocator, and its queries (omp_get_*, omp_in_parallel); its setters change
 * what the next call sees. */
static int openmp_allowed(const char *name) {
    if (strncmp(name, "GOMP_", 5) == 0)
        return strcmp(name, "GOMP_alloc") != 0 && strcmp(name, "GOMP_free") != 0;
    return strncmp(name, "omp_get_", 8) == 0 || strcmp(name, "omp_in_parallel") == 0;
}

static void *libm_handle, *libmvec_handle;

static void open_math_libraries(void) {
    libm_handle = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    libmvec_handle = dlopen("libmvec.so.1", RTLD_NOW | RTLD_LOCAL);
}

/* Whether name is a function of the math library itself (not one of libc's that dlsym finds
 * through libm's dependencies), less its floating-point environment (fe*: rounding modes and
 * exception flags outlive a call, and would outlive it in the user's process too) and signgam. */
static int math_allowed(const char *name) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, open_math_libraries);
    if (strncmp(name, "fe", 2) == 0 || strcmp(name, "signgam") == 0)
        return 0;
    void *const handles[] = {libm_handle, libmvec_handle};
    for (int i = 0; i < 2; i++) {
        void *addr = handles[i] ? dlsym(handles[i], name) : NULL;
        Dl_info info;
        if (!addr || !dladdr(addr, &info) || !info.dli_fname)
            continue;
        const char *base = strrchr(info.dli_fname, '/');
        base = base ? base + 1 : info.dli_fname;
        if (strncmp(base, "libm.so", 7) == 0 || strncmp(base, "libmvec.so", 10) == 0)
            return 1;
    }
    return 0;
}

/* NULL when the candidate may call name, else why not. */
static const char *import_refused(const char *name) {
    for (size_t i = 0; i < sizeof libc_allowed / sizeof libc_allowed[0]; i++)
        if (strcmp(name, libc_allowed[i]) == 0)
            return NULL;
    if (openmp_allowed(name) || math_allowed(name))
        return NULL;
    if (strstr(name, "alloc"))
        return "of the heap, a candidate may call malloc, calloc, realloc, aligned_alloc, "
               "posix_memalign and free (a heap of the call's own, emptied after it)";
    return "it is not among the functions a candidate may call (abi.md): the math library, "
           "OpenMP's parallel regions and queries, malloc and free, memcpy/memmove/memset/memcmp, "
           "the clock, abort and printf; the rest of the C library keeps state from one call to "
           "the next";
}

/* Checks n_bytes of relocations at va (RELA when rela, else REL). */
static int check_relocs(const elf_image *img, const elf_symbols *syms, uint64_t va,
                        uint64_t n_bytes, int rela, uint32_t irelative, int check_imports,
                        kiln_err *err) {
    if (!va || !n_bytes)
        return KILN_OK;
    size_t entsize = rela ? sizeof(Elf64_Rela) : sizeof(Elf64_Rel);
    size_t off = elf_offset(img, va, n_bytes);
    if (off == (size_t)-1)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "the compiled candidate's relocations lie outside "
                         "its file; kiln cannot check it");
    for (uint64_t k = 0; k < n_bytes / entsize; k++) {
        uint64_t info;
        /* r_info is the second word of both Elf64_Rel and Elf64_Rela */
        memcpy(&info, img->data + off + k * entsize + sizeof(Elf64_Addr), sizeof info);
        if (ELF64_R_TYPE(info) == irelative)
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "the candidate has an IFUNC resolver (an IRELATIVE relocation), which "
                             "the loader would run: no candidate code may run when it is loaded");
        uint32_t sym = (uint32_t)ELF64_R_SYM(info);
        if (sym == 0)
            continue;
        size_t soff =
            elf_offset(img, syms->symtab + (uint64_t)sym * sizeof(Elf64_Sym), sizeof(Elf64_Sym));
        if (!syms->symtab || soff == (size_t)-1)
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "the compiled candidate's symbol table lies "
                             "outside its file; kiln cannot check it");
        Elf64_Sym s;
        memcpy(&s, img->data + soff, sizeof s);
        if (ELF64_ST_TYPE(s.st_info) == STT_GNU_IFUNC && s.st_shndx != SHN_UNDEF)
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "the candidate defines '%s' as an IFUNC, whose resolver the loader "
                             "would run: no candidate code may run when it is loaded",
                             sym_name(img, syms, &s));
        if (check_imports && s.st_shndx == SHN_UNDEF && s.st_name != 0) {
            const char *name = sym_name(img, syms, &s);
            const char *why = import_refused(name);
            if (why)
                return kiln_errf(err, KILN_ERR_COMPILE,
                                 "the candidate calls '%s', which it may "
                                 "not: %s",
                                 name, why);
        }
    }
    return KILN_OK;
}

/* Checks an image in memory (the work of kiln_sandbox_check_elf). */
static int check_image(const elf_image *in, int check_imports, kiln_err *err) {
    elf_image img = *in;
    Elf64_Ehdr eh;
    if (img.len < sizeof eh || memcmp(img.data, ELFMAG, SELFMAG) != 0 ||
        img.data[EI_CLASS] != ELFCLASS64)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "the compiled candidate is not a 64-bit ELF object; kiln cannot check it");
    memcpy(&eh, img.data, sizeof eh);
    uint32_t irelative = irelative_type(eh.e_machine);
    if (!irelative)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "the compiled candidate is for machine %d, whose relocations kiln does "
                         "not check",
                         eh.e_machine);
    if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff > img.len ||
        (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > img.len - eh.e_phoff ||
        eh.e_phoff % _Alignof(Elf64_Phdr))
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "the compiled candidate's program headers are malformed");
    img.ph = (const Elf64_Phdr *)(const void *)(img.data + eh.e_phoff);
    img.n_ph = eh.e_phnum;

    const Elf64_Phdr *dyn = NULL;
    for (int i = 0; i < img.n_ph; i++) {
        if (img.ph[i].p_type == PT_DYNAMIC)
            dyn = &img.ph[i];
        if (img.ph[i].p_type == PT_TLS) /* the runner resets static data, not a thread's own */
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "the candidate has thread-local variables: state that outlives a call "
                             "is refused (the runner puts static data back before every call)");
    }
    if (!dyn || dyn->p_offset > img.len || dyn->p_filesz > img.len - dyn->p_offset)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "the compiled candidate has no dynamic section; kiln cannot check it");

    elf_symbols syms = {0};
    uint64_t rela = 0, relasz = 0, rel = 0, relsz = 0, jmprel = 0, pltrelsz = 0, pltrel = DT_RELA;
    size_t n_dyn = dyn->p_filesz / sizeof(Elf64_Dyn);
    for (size_t i = 0; i < n_dyn; i++) {
        Elf64_Dyn d;
        memcpy(&d, img.data + dyn->p_offset + i * sizeof d, sizeof d);
        if (d.d_tag == DT_NULL)
            break;
        switch (d.d_tag) {
        case DT_INIT:
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "the candidate defines _init, which the loader would run: no "
                             "candidate code may run when it is loaded (no constructors)");
        case DT_INIT_ARRAY:
        case DT_PREINIT_ARRAY:
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "the candidate has a constructor (__attribute__((constructor)) or an "
                             ".init_array entry): no candidate code may run when it is loaded");
        case DT_FINI:
        case DT_FINI_ARRAY:
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "the candidate has a destructor (__attribute__((destructor)), _fini "
                             "or a .fini_array entry): no candidate code may run when it is "
                             "unloaded");
        case DT_RELA:
            rela = d.d_un.d_ptr;
            break;
        case DT_RELASZ:
            relasz = d.d_un.d_val;
            break;
        case DT_REL:
            rel = d.d_un.d_ptr;
            break;
        case DT_RELSZ:
            relsz = d.d_un.d_val;
            break;
        case DT_JMPREL:
            jmprel = d.d_un.d_ptr;
            break;
        case DT_PLTRELSZ:
            pltrelsz = d.d_un.d_val;
            break;
        case DT_PLTREL:
            pltrel = d.d_un.d_val;
            break;
        case DT_SYMTAB:
            syms.symtab = d.d_un.d_ptr;
            break;
        case DT_STRTAB:
            syms.strtab = d.d_un.d_ptr;
            break;
        case DT_STRSZ:
            syms.strsz = d.d_un.d_val;
            break;
        default:
            break;
        }
    }
    int rc = check_relocs(&img, &syms, rela, relasz, 1, irelative, check_imports, err);
    if (rc == KILN_OK)
        rc = check_relocs(&img, &syms, rel, relsz, 0, irelative, check_imports, err);
    if (rc == KILN_OK)
        rc = check_relocs(&img, &syms, jmprel, pltrelsz, pltrel == DT_RELA, irelative,
                          check_imports, err);
    return rc;
}

int kiln_sandbox_check_elf(const char *so_path, int check_imports, kiln_err *err) {
    int fd = open(so_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int rc = kiln_errf(err, KILN_ERR_BACKEND, "cannot read the compiled candidate %s: %s",
                           so_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    size_t len = (size_t)st.st_size;
    void *data = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (data == MAP_FAILED)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "the compiled candidate (%zu bytes) cannot be read as an ELF object", len);
    elf_image img = {data, len, NULL, 0};
    int rc = check_image(&img, check_imports, err);
    munmap(data, len);
    return rc;
}
