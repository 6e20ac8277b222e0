// The launch runner of the CUDA emulator (see emu.h). A launch runs its grid block by
// block (in reverse order, so a kernel that assumes block 0 runs first shows it); one
// launch at a time (a block's __shared__ memory is static). A block's threads run as:
// - fibers (mode 0, the default): every thread has its own stack and registers and runs
//   until it reaches a barrier, then the next one; a barrier releases when every live
//   thread of the block (of the warp, for a shuffle) has arrived. Deterministic, and
//   on a 2-core machine some 200x faster than OS threads (the race check's launches:
//   0.04 s against 8.6 s);
// - OS threads (mode 1): one std::thread per CUDA thread, barriers on a mutex and a
//   condition variable; what ThreadSanitizer watches in the race check.
// A thread that returns counts as arrived at every later barrier (as on the hardware). A
// barrier that can never release (threads of one block waiting at different barriers)
// ends the launch with an error instead of hanging.
#include "emu.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

// A fiber's saved context. On x86-64 a switch saves the callee-saved registers on the
// fiber's own stack and swaps stack pointers (no system call, unlike swapcontext, which
// saves the signal mask); elsewhere, ucontext.
#if defined(__x86_64__)
extern "C" void ctx_emu_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl ctx_emu_switch
    .type ctx_emu_switch, @function
ctx_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size ctx_emu_switch, .-ctx_emu_switch
)");
struct FiberCtx {
    void* sp = nullptr;
};
#else
struct FiberCtx {
    ucontext_t uc;
};
#endif

namespace {

constexpr unsigned kMaxThreads = 1024;
constexpr unsigned kWarp = 32;
constexpr int kOk = 0;
constexpr int kDeadlock = 1;
constexpr int kBadLaunch = 2;

std::mutex g_launch;
// The warp shuffle's exchange slots, one per thread of the running block.
unsigned long long g_slots[kMaxThreads];

struct Exec {
    virtual ~Exec() = default;
    virtual void block_barrier() = 0;
    virtual void warp_barrier() = 0;
};
thread_local Exec* t_exec = nullptr;

// --- fibers -------------------------------------------------------------------------------

struct Fibers : Exec {
    static constexpr size_t kStack = 256 * 1024;
    unsigned n = 0;
    std::vector<FiberCtx> ctx;
    std::vector<char*> stacks;
    std::vector<char> done;
    FiberCtx sched;
    unsigned cur = 0, live = 0;
    unsigned long long progress = 0;
    // Arrivals and generation of the block barrier and of each warp's barrier.
    unsigned block_arrived = 0, block_gen = 0;
    std::vector<unsigned> warp_arrived, warp_live, warp_gen;
    void (*call)(void*) = nullptr;
    void* body = nullptr;

    void ensure(unsigned threads) {
        while (stacks.size() < threads) stacks.push_back(static_cast<char*>(std::malloc(kStack)));
        ctx.resize(threads);
        done.assign(threads, 0);
        n = threads;
    }

    static void swap(FiberCtx& from, FiberCtx& to) {
#if defined(__x86_64__)
        ctx_emu_switch(&from.sp, to.sp);
#else
        swapcontext(&from.uc, &to.uc);
#endif
    }

    // Prepares fiber t to start at `entry` on its own stack.
    void prepare(unsigned t) {
#if defined(__x86_64__)
        // The stack as ctx_emu_switch leaves it: six callee-saved registers, then the
        // address its `ret` jumps to, in a 16-byte aligned slot (so `entry` starts with
        // the stack aligned as after a call).
        uintptr_t top = (reinterpret_cast<uintptr_t>(stacks[t]) + kStack) & ~uintptr_t(15);
        void** slot = reinterpret_cast<void**>(top - 16);
        *slot = reinterpret_cast<void*>(&entry);
        void** sp = slot - 6;
        for (int r = 0; r < 6; ++r) sp[r] = nullptr;
        ctx[t].sp = sp;
#else
        getcontext(&ctx[t].uc);
        ctx[t].uc.uc_stack.ss_sp = stacks[t];
        ctx[t].uc.uc_stack.ss_size = kStack;
        ctx[t].uc.uc_link = &sched.uc;
        makecontext(&ctx[t].uc, entry, 0);
#endif
    }

    void yield() { swap(ctx[cur], sched); }

    void release_if_complete() {
        if (block_arrived > 0 && block_arrived == live) {
            block_arrived = 0;
            ++block_gen;
        }
        for (unsigned w = 0; w < warp_live.size(); ++w) {
            if (warp_arrived[w] > 0 && warp_arrived[w] == warp_live[w]) {
                warp_arrived[w] = 0;
                ++warp_gen[w];
            }
        }
    }

    void block_barrier() override {
        unsigned gen = block_gen;
        ++block_arrived;
        ++progress;
        release_if_complete();
        while (block_gen == gen) yield();
    }

    void warp_barrier() override {
        unsigned w = cur / kWarp;
        unsigned gen = warp_gen[w];
        ++warp_arrived[w];
        ++progress;
        release_if_complete();
        while (warp_gen[w] == gen) yield();
    }

    static void entry();

    int run_block() {
        live = n;
        block_arrived = 0;
        unsigned warps = (n + kWarp - 1) / kWarp;
        warp_arrived.assign(warps, 0);
        warp_gen.assign(warps, 0);
        warp_live.assign(warps, 0);
        for (unsigned t = 0; t < n; ++t) {
            ++warp_live[t / kWarp];
            done[t] = 0;
            prepare(t);
        }
        while (live > 0) {
            unsigned long long before = progress;
            for (unsigned t = 0; t < n; ++t) {
                if (done[t]) continue;
                cur = t;
                threadIdx = uint3{t, 0, 0};
                swap(sched, ctx[t]);
            }
            if (live > 0 && progress == before) return kDeadlock;
        }
        return kOk;
    }
};

Fibers g_fibers;

void Fibers::entry() {
    Fibers& f = g_fibers;
    f.call(f.body);
    unsigned t = f.cur;
    f.done[t] = 1;
    --f.live;
    --f.warp_live[t / kWarp];
    ++f.progress;
    f.release_if_complete();
#if defined(__x86_64__)
    // A finished fiber never runs again: back to the scheduler for good.
    ctx_emu_switch(&f.ctx[t].sp, f.sched.sp);
#endif
    // With ucontext, returning resumes the scheduler (uc_link).
}

// --- OS threads -----------------------------------------------------------------------------

struct Group {
    unsigned live = 0, arrived = 0, gen = 0;
};

struct Threads : Exec {
    std::mutex m;
    std::condition_variable cv;
    Group block;
    std::vector<Group> warps;
    bool dead = false;

    void release_locked(Group& g) {
        if (g.arrived > 0 && g.arrived == g.live) {
            g.arrived = 0;
            ++g.gen;
            cv.notify_all();
        }
    }

    void wait(Group& g) {
        std::unique_lock<std::mutex> lk(m);
        unsigned gen = g.gen;
        ++g.arrived;
        release_locked(g);
        // A barrier that cannot release within 10 s is taken as a deadlock.
        if (!cv.wait_for(lk, std::chrono::seconds(10), [&] { return g.gen != gen || dead; })) dead = true;
        if (dead) {
            cv.notify_all();
            lk.unlock();
            // Leave the rest of this thread's work undone; the launch reports the error.
            throw 1;
        }
    }

    void block_barrier() override { wait(block); }
    void warp_barrier() override { wait(warps[threadIdx.x / kWarp]); }

    void leave(unsigned t) {
        std::lock_guard<std::mutex> lk(m);
        --block.live;
        --warps[t / kWarp].live;
        release_locked(block);
        for (auto& w : warps) release_locked(w);
    }

    int run_block(unsigned n, void (*call)(void*), void* body, uint3 b, dim3 bd, dim3 gd) {
        block = Group{n, 0, 0};
        warps.assign((n + kWarp - 1) / kWarp, Group{});
        for (unsigned t = 0; t < n; ++t) ++warps[t / kWarp].live;
        dead = false;
        std::vector<std::thread> th;
        th.reserve(n);
        for (unsigned t = 0; t < n; ++t) {
            th.emplace_back([=] {
                threadIdx = uint3{t, 0, 0};
                blockIdx = b;
                blockDim = bd;
                gridDim = gd;
                t_exec = this;
                try {
                    call(body);
                } catch (int) {
                }
                leave(t);
            });
        }
        for (auto& x : th) x.join();
        return dead ? kDeadlock : kOk;
    }
};

}  // namespace

void ctx_emu_syncthreads() { t_exec->block_barrier(); }

unsigned long long ctx_emu_shfl_xor(unsigned long long bits, int lane_mask) {
    unsigned t = threadIdx.x;
    g_slots[t] = bits;
    t_exec->warp_barrier();
    unsigned long long r = g_slots[(t ^ (unsigned)lane_mask) % kMaxThreads];
    t_exec->warp_barrier();
    return r;
}

int ctx_emu_launch(const ctx_emu_grid* g, void (*call)(void*), void* body) {
    if (g->threads == 0 || g->threads > kMaxThreads || g->gx == 0 || g->gy == 0 || g->gz == 0) return kBadLaunch;
    std::lock_guard<std::mutex> lk(g_launch);
    dim3 bd{g->threads, 1, 1};
    dim3 gd{g->gx, g->gy, g->gz};
    unsigned long long blocks = (unsigned long long)g->gx * g->gy * g->gz;
    Threads threads;
    for (unsigned long long r = blocks; r-- > 0;) {
        uint3 b{(unsigned)(r % g->gx), (unsigned)((r / g->gx) % g->gy), (unsigned)(r / ((unsigned long long)g->gx * g->gy))};
        int rc;
        if (g->mode == 1) {
            rc = threads.run_block(g->threads, call, body, b, bd, gd);
        } else {
            blockIdx = b;
            blockDim = bd;
            gridDim = gd;
            t_exec = &g_fibers;
            g_fibers.ensure(g->threads);
            g_fibers.call = call;
            g_fibers.body = body;
            rc = g_fibers.run_block();
        }
        if (rc != kOk) return rc;
    }
    return kOk;
}
