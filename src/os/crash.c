/* SPDX-License-Identifier: MIT */
/* crash.c - crash records: the worker's module table and async-signal-safe fill, the supervisor's copy, validation and decoding; see crash.h. */
#define _GNU_SOURCE
#include "crash.h"

#include <elf.h>
#include <execinfo.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unwind.h>


/* ------------------------------------------------------------------ si_code names */

struct code_name {
    int signo; /* 0: any signal */
    int code;
    const char *name;
};

/* The kernel's numbers (include/uapi/asm-generic/siginfo.h), the same on
 * every Linux architecture; spelled out so that a libc that lacks a recent
 * one (SEGV_MTEAERR ...) still names it. */
static const struct code_name codes[] = {
    {SIGSEGV, 1, "SEGV_MAPERR"},  {SIGSEGV, 2, "SEGV_ACCERR"},   {SIGSEGV, 3, "SEGV_BNDERR"},
    {SIGSEGV, 4, "SEGV_PKUERR"},  {SIGSEGV, 5, "SEGV_ACCADI"},   {SIGSEGV, 6, "SEGV_ADIDERR"},
    {SIGSEGV, 7, "SEGV_ADIPERR"}, {SIGSEGV, 8, "SEGV_MTEAERR"},  {SIGSEGV, 9, "SEGV_MTESERR"},
    {SIGSEGV, 10, "SEGV_CPERR"},  {SIGBUS, 1, "BUS_ADRALN"},     {SIGBUS, 2, "BUS_ADRERR"},
    {SIGBUS, 3, "BUS_OBJERR"},    {SIGBUS, 4, "BUS_MCEERR_AR"},  {SIGBUS, 5, "BUS_MCEERR_AO"},
    {SIGFPE, 1, "FPE_INTDIV"},    {SIGFPE, 2, "FPE_INTOVF"},     {SIGFPE, 3, "FPE_FLTDIV"},
    {SIGFPE, 4, "FPE_FLTOVF"},    {SIGFPE, 5, "FPE_FLTUND"},     {SIGFPE, 6, "FPE_FLTRES"},
    {SIGFPE, 7, "FPE_FLTINV"},    {SIGFPE, 8, "FPE_FLTSUB"},     {SIGFPE, 14, "FPE_FLTUNK"},
    {SIGFPE, 15, "FPE_CONDTRAP"}, {SIGILL, 1, "ILL_ILLOPC"},     {SIGILL, 2, "ILL_ILLOPN"},
    {SIGILL, 3, "ILL_ILLADR"},    {SIGILL, 4, "ILL_ILLTRP"},     {SIGILL, 5, "ILL_PRVOPC"},
    {SIGILL, 6, "ILL_PRVREG"},    {SIGILL, 7, "ILL_COPROC"},     {SIGILL, 8, "ILL_BADSTK"},
    {SIGILL, 9, "ILL_BADIADDR"},  {SIGTRAP, 1, "TRAP_BRKPT"},    {SIGTRAP, 2, "TRAP_TRACE"},
    {SIGTRAP, 3, "TRAP_BRANCH"},  {SIGTRAP, 4, "TRAP_HWBKPT"},   {SIGTRAP, 5, "TRAP_UNK"},
    {SIGSYS, 1, "SYS_SECCOMP"},   {SIGSYS, 2, "SYS_USER_DISPATCH"},
    {0, 0, "SI_USER"},            {0, 0x80, "SI_KERNEL"},        {0, -1, "SI_QUEUE"},
    {0, -2, "SI_TIMER"},          {0, -3, "SI_MESGQ"},           {0, -4, "SI_ASYNCIO"},
    {0, -5, "SI_SIGIO"},          {0, -6, "SI_TKILL"},
};

const char *pm__crash_code_name(int signo, int code)
{
    /* Positive codes below SI_KERNEL mean something per signal; the others
     * mean the same for every signal. */
    int per_signal = code > 0 && code < 0x80;
    for (size_t i = 0; i < PM__ARRAY_SIZE(codes); i++)
        if (codes[i].code == code && codes[i].signo == (per_signal ? signo : 0))
            return codes[i].name;
    return NULL;
}

int pm__crash_signal_recorded(int signo)
{
    switch (signo) {
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGABRT:
    case SIGTRAP:
    case SIGSYS:
        return 1;
    default:
        return 0;
    }
}

/* ------------------------------------------------------------------ worker: modules */

/* dl_iterate_phdr's callback argument, declared here rather than taken
 * from <link.h>, which would bring the whole ELF type set. The first four fields
 * have been the ABI since glibc 2.2.4 and are all we read (size tells how
 * much the caller passed). */
#if UINTPTR_MAX > 0xffffffffu
typedef Elf64_Phdr pm__phdr;
#else
typedef Elf32_Phdr pm__phdr;
#endif
struct pm__dl_phdr_info {
    uintptr_t dlpi_addr;
    const char *dlpi_name;
    const pm__phdr *dlpi_phdr;
    uint16_t dlpi_phnum;
    /* glibc 2.4 on, when size covers them: loads and unloads so far. */
    unsigned long long dlpi_adds;
    unsigned long long dlpi_subs;
};
extern int dl_iterate_phdr(int (*cb)(struct pm__dl_phdr_info *, size_t, void *), void *data);

PM__READY_TEXT static void copy_path(char *dst, const char *src)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < PM_CRASH_PATH_MAX; i++)
        dst[i] = src[i];
    dst[i] = '\0';
}

PM__READY_TEXT static int add_module(struct pm__dl_phdr_info *info, size_t size, void *arg)
{
    pm__crash_modules *t = arg;
    (void)size;
    if (t->n >= PM__CRASH_TABLE_MAX)
        return 1;
    pm__crash_module *m = &t->m[t->n];
    uint64_t lo = UINT64_MAX, hi = 0;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const pm__phdr *p = &info->dlpi_phdr[i];
        if (p->p_type != PT_LOAD)
            continue;
        uint64_t a = (uint64_t)info->dlpi_addr + p->p_vaddr;
        if (a < lo)
            lo = a;
        if (a + p->p_memsz > hi)
            hi = a + p->p_memsz;
    }
    if (lo >= hi)
        return 0;
    m->lo = lo;
    m->hi = hi;
    /* The load bias: 0 for a non-PIE executable, whose addresses addr2line
     * takes as they are; the base of a PIE or shared object otherwise. */
    m->bias = (uint64_t)info->dlpi_addr;
    if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0') {
        copy_path(m->path, info->dlpi_name);
    } else {
        /* The main program has no name here: /proc/self/exe has it. Read
         * once: a fork child inherits it, an exec clears it. */
        char *exe = t->exe;
        if (exe[0] == '\0') {
            ssize_t k = readlink("/proc/self/exe", exe, PM_CRASH_PATH_MAX - 1);
            exe[k > 0 ? k : 0] = '\0';
        }
        copy_path(m->path, exe[0] != '\0' ? exe : "?");
    }
    t->n++;
    return 0;
}

/* offsetof(struct pm__dl_phdr_info, dlpi_subs) + its size: what the
 * loader must pass for the counts to be there. */
#define PM__DL_COUNTS_SIZE (offsetof(struct pm__dl_phdr_info, dlpi_subs) + sizeof(unsigned long long))

PM__READY_TEXT static int read_counts(struct pm__dl_phdr_info *info, size_t size, void *arg)
{
    unsigned long long *c = arg;
    if (size >= PM__DL_COUNTS_SIZE) {
        c[0] = info->dlpi_adds;
        c[1] = info->dlpi_subs;
        c[2] = 1;
    }
    return 1; /* the counts are the same in every entry: one is enough */
}

PM__READY_TEXT void pm__crash_modules_load(pm__crash_modules *t)
{
    unsigned long long c[3] = {0, 0, 0};
    dl_iterate_phdr(read_counts, c);
    t->n = 0;
    dl_iterate_phdr(add_module, t);
    /* Counts of 0/0 never match a refresh's (adds is at least the
     * number of modules loaded at start): without them, always reload. */
    t->adds = c[2] ? c[0] : 0;
    t->subs = c[2] ? c[1] : 0;
}

void pm__crash_modules_refresh(pm__crash_modules *t)
{
    unsigned long long c[3] = {0, 0, 0};
    dl_iterate_phdr(read_counts, c);
    if (c[2] && t->n > 0 && c[0] == t->adds && c[1] == t->subs)
        return;
    pm__crash_modules_load(t);
}

/* ------------------------------------------------------------------ worker: the unwinder */

/* The unwinder linked into this binary, when the build put one there:
 * configure links libgcc's static unwinder (libgcc_eh.a, -static-libgcc,
 * its symbols hidden) into the library and the programs, and forces it in
 * with -u _Unwind_Backtrace. Weak, so that a program that links
 * libprocmesh.a without it (procmesh-worker.pc) gets no libgcc_s.so as a
 * load-time dependency either: the references are then NULL, and glibc's
 * backtrace() is used, which dlopens libgcc_s on its first call. That
 * load costs an exec'd worker some 15 system calls, the relocations'
 * page faults and libgcc_s's constructor, whose cpuid instructions each
 * trap to the hypervisor in a virtual machine: about 170 us of CPU after
 * every ready, which a spawn of many workers pays on the CPUs the next
 * workers start on (doc/benchmarks.md, stop 64). */
#pragma weak _Unwind_Backtrace
#pragma weak _Unwind_GetIP
#pragma weak _Unwind_GetCFA

/* One walk of the linked unwinder: the frames above the function that
 * started it, as glibc's backtrace() gives them. */
struct walk {
    void **frames;
    int max;
    int n;        /* -1 on the first call, the starting function's frame */
    uintptr_t cfa; /* the last frame's canonical frame address */
};

static _Unwind_Reason_Code walk_step(struct _Unwind_Context *ctx, void *arg)
{
    struct walk *w = arg;
    if (w->n >= 0) {
        void *ip = (void *)_Unwind_GetIP(ctx);
        uintptr_t cfa = (uintptr_t)_Unwind_GetCFA(ctx);
        /* The same frame twice: an unwind table that does not move on
         * (a hand-written one, a corrupt stack); stop rather than fill. */
        if (w->n > 0 && w->frames[w->n - 1] == ip && cfa == w->cfa)
            return _URC_END_OF_STACK;
        w->frames[w->n] = ip;
        w->cfa = cfa;
    }
    return ++w->n == w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* Not inlined: the walk's first frame, skipped, must be this one. */
static __attribute__((noinline)) int walk_linked(void **frames, int max)
{
    struct walk w = {frames, max, -1, 0};
    (void)_Unwind_Backtrace(walk_step, &w);
    /* The walk ends with a frame of address 0 above the program's entry
     * point (_start has no caller): not a frame. */
    if (w.n > 1 && frames[w.n - 1] == NULL)
        w.n--;
    return w.n > 0 ? w.n : 0;
}

/* All three linked: another unwinder (LLVM's libunwind.a) keeps
 * _Unwind_GetIP in another archive member than _Unwind_Backtrace, which
 * -u alone pulls in. */
static int linked(void)
{
    return _Unwind_Backtrace != NULL && _Unwind_GetIP != NULL && _Unwind_GetCFA != NULL;
}

/* Set once the unwinder has run outside a handler; a fork child inherits
 * it with the loaded (or linked) unwinder. */
static atomic_int unwinder_primed;

PM__READY_TEXT void pm__crash_unwinder_prime(void)
{
    if (atomic_load_explicit(&unwinder_primed, memory_order_acquire))
        return;
    void *warm[4];
    /* The linked unwinder's first walk sets up its register table (a
     * pthread_once): done here, outside a handler, as the load is. */
    if (linked())
        (void)walk_linked(warm, (int)PM__ARRAY_SIZE(warm));
    else
        (void)backtrace(warm, (int)PM__ARRAY_SIZE(warm));
    atomic_store_explicit(&unwinder_primed, 1, memory_order_release);
}

int pm__crash_backtrace(void **frames, int max)
{
    /* Unprimed, backtrace() would dlopen libgcc_s here, inside a signal
     * handler that may have interrupted malloc: it could deadlock on
     * malloc's lock or the loader's. No frames is the safe answer. The
     * linked unwinder loads nothing, but its first walk's pthread_once
     * is no more a handler's to run: the same rule for both. */
    if (max <= 0 || !atomic_load_explicit(&unwinder_primed, memory_order_acquire))
        return 0;
    if (linked())
        return walk_linked(frames, max);
    return backtrace(frames, max);
}

/* ------------------------------------------------------------------ worker: the record */

/* The record's index of the module holding a, adding the module (bias and
 * path) on first use; PM__CRASH_NO_MODULE when no module holds it or the
 * record has no room left. used[] maps record index -> table index. */
static uint32_t place(struct pm__crash_rec *r, const pm__crash_modules *t, unsigned *used,
                      uint64_t a)
{
    for (unsigned i = 0; i < t->n && i < PM__CRASH_TABLE_MAX; i++) {
        if (a < t->m[i].lo || a >= t->m[i].hi)
            continue;
        for (uint32_t j = 0; j < r->nmodules; j++)
            if (used[j] == i)
                return j;
        if (r->nmodules >= PM_CRASH_MODULES)
            return PM__CRASH_NO_MODULE;
        uint32_t j = r->nmodules++;
        used[j] = i;
        r->modules[j].bias = t->m[i].bias;
        copy_path(r->modules[j].path, t->m[i].path);
        return j;
    }
    return PM__CRASH_NO_MODULE;
}

void pm__crash_fill(struct pm__crash_rec *r, const pm__crash_modules *t, int signo, int code,
                    uint64_t fault_addr, uint64_t pc, const uint64_t *frames, unsigned n)
{
    unsigned used[PM_CRASH_MODULES];
    /* Mark the record incomplete before touching any field, so that a death
     * in the middle (a second fault, SIGKILL) is recognised by the reader.
     * The process that reads it is another one, but only after this one is
     * reaped (or, for a descendant that kept the mapping, at any time): the
     * release stores order the fields between the two seq writes. */
    atomic_store_explicit(&r->seq, PM__CRASH_WRITING, memory_order_release);
    r->signo = signo;
    r->code = code;
    r->fault_addr = fault_addr;
    r->pc = pc;
    r->nmodules = 0;
    r->nframes = 0;
    /* Frames before the faulting one are the handler's and the signal
     * trampoline's: start at the frame that is the pc when there is one. */
    unsigned first = 0;
    for (unsigned i = 0; pc != 0 && i < n; i++)
        if (frames[i] == pc) {
            first = i;
            break;
        }
    r->pc_module = pc != 0 ? place(r, t, used, pc) : PM__CRASH_NO_MODULE;
    for (unsigned i = first; i < n && r->nframes < PM_CRASH_FRAMES; i++) {
        r->frames[r->nframes] = frames[i];
        r->frame_module[r->nframes] = (uint8_t)place(r, t, used, frames[i]);
        r->nframes++;
    }
    atomic_store_explicit(&r->seq, PM__CRASH_COMMITTED, memory_order_release);
}

/* ------------------------------------------------------------------ supervisor */

/* Checks module index m of a record with nmodules entries and the address
 * placed in it: -1 (none), the index, or -2 when it is not one. */
static int check_module(const struct pm__crash_rec *r, uint32_t m, uint64_t addr)
{
    if (m == PM__CRASH_NO_MODULE)
        return -1;
    if (m >= r->nmodules || addr < r->modules[m].bias)
        return -2;
    return (int)m;
}

int pm__crash_decode(const struct pm__crash_rec *r, int exit_signal, pm_crash_report *out)
{
    uint32_t seq = atomic_load_explicit(&r->seq, memory_order_relaxed);
    if (seq == 0)
        return PM_CRASH_UNRECORDED;
    /* Half-written, or a record that does not describe the death we saw. */
    if (seq != PM__CRASH_COMMITTED || r->signo != exit_signal)
        return PM_CRASH_INVALID;
    if (r->nframes > PM_CRASH_FRAMES || r->nmodules > PM_CRASH_MODULES)
        return PM_CRASH_INVALID;
    for (uint32_t j = 0; j < r->nmodules; j++)
        if (memchr(r->modules[j].path, '\0', PM_CRASH_PATH_MAX) == NULL)
            return PM_CRASH_INVALID;
    int pm = check_module(r, r->pc_module, r->pc);
    if (pm == -2)
        return PM_CRASH_INVALID;
    for (uint32_t i = 0; i < r->nframes; i++)
        if (check_module(r, r->frame_module[i], r->frames[i]) == -2)
            return PM_CRASH_INVALID;
    /* Every field checked: now fill. */
    out->code = r->code;
    const char *name = pm__crash_code_name(r->signo, r->code);
    if (name != NULL)
        snprintf(out->code_name, sizeof(out->code_name), "%s", name);
    else
        snprintf(out->code_name, sizeof(out->code_name), "%d", (int)r->code);
    out->fault_addr = r->fault_addr;
    out->pc = r->pc;
    out->pc_module = pm;
    out->pc_offset = pm >= 0 ? r->pc - r->modules[pm].bias : 0;
    out->nframes = r->nframes;
    for (uint32_t i = 0; i < r->nframes; i++) {
        int m = check_module(r, r->frame_module[i], r->frames[i]);
        out->frames[i].addr = r->frames[i];
        out->frames[i].module = m;
        out->frames[i].offset = m >= 0 ? r->frames[i] - r->modules[m].bias : 0;
    }
    out->nmodules = r->nmodules;
    for (uint32_t j = 0; j < r->nmodules; j++) {
        /* Printable ASCII only, and nothing that needs quoting in a log
         * line or JSON: the path came from the worker. */
        char *d = out->modules[j];
        const char *s = r->modules[j].path;
        size_t k = 0;
        for (; s[k] != '\0'; k++)
            d[k] = (s[k] >= 0x20 && s[k] < 0x7f && s[k] != '"' && s[k] != '\\') ? s[k] : '?';
        d[k] = '\0';
    }
    return PM_CRASH_RECORDED;
}

void pm__crash_collect(pm_crash_report **last, const void *shared_rec, uint64_t incarnation,
                       int signal, int core_dumped)
{
    if (!pm__crash_signal_recorded(signal))
        return;
    int saved = errno;
    /* The report holds what the worker wrote (its module paths): memory of
     * its own, which other slots' fork-mode workers inherit zeroed. */
    if (*last == NULL)
        *last = pm__wipemem_alloc(sizeof(**last));
    errno = saved;
    if (*last == NULL)
        return; /* out of memory: the exit is still reported, without its record */
    pm_crash_report *rep = *last;
    memset(rep, 0, sizeof(*rep));
    rep->incarnation = incarnation;
    rep->signal = signal;
    rep->core_dumped = core_dumped;
    rep->pc_module = -1;
    rep->state = PM_CRASH_UNRECORDED;
    if (shared_rec == NULL)
        return;
    /* One copy, then only the copy is read: a descendant of a fork-mode
     * worker may still have the page mapped and change it under us. */
    struct pm__crash_rec copy;
    memcpy(&copy, shared_rec, sizeof(copy));
    rep->state = pm__crash_decode(&copy, signal, rep);
    explicit_bzero(&copy, sizeof(copy));
    if (rep->state != PM_CRASH_RECORDED) {
        /* Nothing of a record that failed its checks is shown. */
        int state = rep->state;
        memset(rep, 0, sizeof(*rep));
        rep->state = state;
        rep->incarnation = incarnation;
        rep->signal = signal;
        rep->core_dumped = core_dumped;
        rep->pc_module = -1;
    }
}
