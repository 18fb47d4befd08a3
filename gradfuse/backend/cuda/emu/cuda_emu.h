// gradfuse's CUDA-on-CPU header: the CUDA C that gradfuse generates, unchanged, compiled
// by a host C++20 compiler (`g++ -std=c++20 -include cuda_emu.h kernels.cu`).
//
// Two modes, chosen when the library is built:
// - fibers (default): a block's threads are fibers on one OS thread, switched at every
//   __syncthreads() (a hand-written x86-64 stack switch, which costs a few ns where
//   swapcontext makes a system call; ucontext elsewhere, or with -DGF_EMU_UCONTEXT);
//   blocks are spread over a pool of OS threads, and a __shared__ array is
//   `static thread_local`: one copy per block in flight.
// - threads (-DGF_EMU_THREADS): one OS thread per CUDA thread of a block, a std::barrier
//   per __syncthreads(), one block at a time, __shared__ arrays `static`. Built with
//   -fsanitize=thread, ThreadSanitizer reports a missing barrier or a non-atomic shared
//   update at the kernel's line.
//
// Kernels without __syncthreads() run their threads as plain calls, one after the other
// (a barrier reached there is an error, not a silent no-op). What the generated code uses
// is what is defined: .x/.y/.z ids, __shared__ arrays, uniform __syncthreads(), float
// atomicAdd, and the C math library (exp2f, log2f, sqrtf, fmaxf, ...).
//
//     extern "C" __global__ void k0(float* __restrict__ v0) { v0[threadIdx.x] = 1.0f; }
//     GF_KERNEL(k0)  // extern "C" void gf_tramp_k0(void** args): k0((float*)args[0])
//     gf_emu_launch(gf_tramp_k0, args, grid, block, workers, barriers, error, 256);
#pragma once
#include <math.h>
#include <stdint.h>
#include <ucontext.h>

#include <atomic>
#include <barrier>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

namespace gf_emu {

#if defined(__x86_64__) && !defined(GF_EMU_UCONTEXT)
// Saves the callee-saved registers on the current stack, stores the stack pointer in
// *save and continues on the stack `load` (made by `make` or saved by an earlier switch).
// The floating-point control registers are not switched: every fiber of a block runs with
// the OS thread's. One translation unit per library includes this header.
extern "C" void gf_emu_switch(void** save, void* load);
asm(R"(
  .text
  .globl gf_emu_switch
  .hidden gf_emu_switch
  .type gf_emu_switch, @function
gf_emu_switch:
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
  .size gf_emu_switch, .-gf_emu_switch
)");

struct Context {
  void* sp = nullptr;
};

inline void jump(Context& from, Context& to) { gf_emu_switch(&from.sp, to.sp); }

// A context that starts `entry` (which never returns) on the stack [stack, stack + size).
inline void make(Context& c, char* stack, size_t size, void (*entry)()) {
  void** sp = (void**)(((uintptr_t)(stack + size)) & ~(uintptr_t)15);
  *--sp = nullptr;         // where entry's return address would be
  *--sp = (void*)entry;    // 16-aligned: entry starts as if called
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
  c.sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};

inline void jump(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }

inline void make(Context& c, char* stack, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

struct Block;

struct Thread {  // one CUDA thread: its ids and, in fibers mode, its context
  dim3 tid, bid, bdim, gdim;
  Block* block = nullptr;
  Context context;
  bool done = false;
  bool waiting = false;  // stopped at a __syncthreads()
};

inline thread_local Thread* cur = nullptr;

using Tramp = void (*)(void**);

struct Error {  // the first failure of a launch, reported to the host
  std::mutex m;
  char text[256] = "";
  bool set = false;
  void raise(const char* what, const dim3& bid) {
    std::lock_guard<std::mutex> hold(m);
    if (!set) snprintf(text, sizeof text, "%s (block (%u, %u, %u))", what, bid.x, bid.y, bid.z);
    set = true;
  }
};

struct Block {  // the block being run by one OS thread (fibers) or by all (threads)
  Context sched;
  Error* error = nullptr;
  int fibers = 0;  // 1: the threads are fibers; 0: plain calls; 2: OS threads
#ifdef GF_EMU_THREADS
  std::barrier<>* barrier = nullptr;
#endif
  void sync(Thread* me) {
    if (fibers == 1) {
      me->waiting = true;
      jump(me->context, sched);
      me->waiting = false;
      return;
    }
#ifdef GF_EMU_THREADS
    if (fibers == 2) {
      barrier->arrive_and_wait();
      return;
    }
#endif
    error->raise("__syncthreads() in a kernel launched as barrier-free", me->bid);
  }
};

}  // namespace gf_emu

#define threadIdx (gf_emu::cur->tid)
#define blockIdx (gf_emu::cur->bid)
#define blockDim (gf_emu::cur->bdim)
#define gridDim (gf_emu::cur->gdim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#ifdef GF_EMU_THREADS
#define __shared__ static
#else
#define __shared__ static thread_local
#endif

inline void __syncthreads() {
  gf_emu::Thread* me = gf_emu::cur;  // on this fiber's own stack
  me->block->sync(me);
  gf_emu::cur = me;  // another fiber of the block ran meanwhile
}

inline float atomicAdd(float* address, float value) {
  return std::atomic_ref<float>(*address).fetch_add(value);
}

namespace gf_emu {

template <class... A, std::size_t... I>
inline void call(void (*kernel)(A...), void** args, std::index_sequence<I...>) {
  kernel(static_cast<A>(args[I])...);
}

template <class... A>
inline void call(void (*kernel)(A...), void** args) {
  call(kernel, args, std::index_sequence_for<A...>{});
}

struct Launch {
  Tramp tramp;
  void** args;
  dim3 grid, block;
  int fibers;
  Error error;
  std::atomic<unsigned long> next{0};
  unsigned long blocks() const { return (unsigned long)grid.x * grid.y * grid.z; }
  dim3 block_id(unsigned long b) const {
    return dim3{unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / grid.x / grid.y)};
  }
  dim3 thread_id(unsigned t) const {
    return dim3{t % block.x, t / block.x % block.y, t / block.x / block.y};
  }
};

constexpr size_t STACK = 64 << 10;  // a fiber's stack (the kernels keep their values in locals)

struct Fibers {  // one OS thread's fibers, kept from launch to launch
  std::vector<Thread> threads;
  std::vector<char> stacks;
  void reserve(unsigned n) {
    if (threads.size() < n) threads.resize(n);
    if (stacks.size() < n * STACK) stacks.resize(n * STACK);
  }
};

inline thread_local Fibers fibers_here;
inline thread_local Launch* launch_here = nullptr;

inline void fiber_entry() {
  Thread* me = cur;
  launch_here->tramp(launch_here->args);
  me->done = true;
  jump(me->context, me->block->sched);  // never resumed
  __builtin_unreachable();
}

inline void run_block(Launch& L, unsigned long b) {
  unsigned n = L.block.x * L.block.y * L.block.z;
  Block blk;
  blk.error = &L.error;
  blk.fibers = L.fibers;
  Fibers& f = fibers_here;
  f.reserve(n);
  dim3 bid = L.block_id(b);
  for (unsigned t = 0; t < n; ++t) {
    Thread& th = f.threads[t];
    th.tid = L.thread_id(t), th.bid = bid, th.bdim = L.block, th.gdim = L.grid;
    th.block = &blk, th.done = false, th.waiting = false;
  }
  if (!L.fibers) {  // no barrier in the kernel: each thread runs to its end in turn
    for (unsigned t = 0; t < n && !L.error.set; ++t) {
      cur = &f.threads[t];
      L.tramp(L.args);
    }
    return;
  }
  launch_here = &L;
  for (unsigned t = 0; t < n; ++t) {
    Thread& th = f.threads[t];
    // the stacks' tops staggered by a cache line: 64 KiB apart, they would share a set
    make(th.context, f.stacks.data() + t * STACK, STACK - t % 64 * 64, fiber_entry);
  }
  unsigned alive = n;
  while (alive) {  // a round: every live thread runs to its next barrier or its end
    unsigned ended = 0;
    for (unsigned t = 0; t < n; ++t) {
      Thread& th = f.threads[t];
      if (th.done) continue;
      cur = &th;
      jump(blk.sched, th.context);
      if (th.done) ++ended;
    }
    if (ended && ended != alive) {  // some threads wait at a barrier that others left
      L.error.raise("__syncthreads() not reached by every thread of the block", bid);
      return;  // the waiting fibers are abandoned: their stacks are reused
    }
    alive -= ended;
  }
}

inline void work(Launch& L) {
  for (;;) {
    unsigned long b = L.next.fetch_add(1);
    if (b >= L.blocks() || L.error.set) return;
    run_block(L, b);
  }
}

#ifdef GF_EMU_THREADS
struct Team {  // threads mode: one OS thread per CUDA thread, kept from launch to launch
  std::mutex m;
  std::condition_variable wake, idle;
  Launch* job = nullptr;
  std::barrier<>* barrier = nullptr;
  unsigned long generation = 0;
  unsigned busy = 0;
  std::vector<std::thread> threads;

  void member(unsigned t) {  // runs CUDA thread t of every block, blocks in turn
    unsigned long seen = 0;
    Thread th;
    Block blk;
    blk.fibers = 2;
    for (;;) {
      Launch* L;
      {
        std::unique_lock<std::mutex> hold(m);
        wake.wait(hold, [&] { return generation != seen; });
        seen = generation, L = job, blk.barrier = barrier;
      }
      if (t < L->block.x * L->block.y * L->block.z) {
        blk.error = &L->error;
        th.tid = L->thread_id(t), th.bdim = L->block, th.gdim = L->grid, th.block = &blk;
        for (unsigned long b = 0; b < L->blocks(); ++b) {
          th.bid = L->block_id(b);
          cur = &th;
          L->tramp(L->args);
          blk.barrier->arrive_and_wait();  // the shared arrays are free for the next block
        }
      }
      std::lock_guard<std::mutex> hold(m);
      if (--busy == 0) idle.notify_all();
    }
  }
  void run(Launch& L) {
    unsigned n = L.block.x * L.block.y * L.block.z;
    std::barrier<> blocks_barrier(n);
    std::unique_lock<std::mutex> hold(m);
    while (threads.size() < n) {
      threads.emplace_back([this, t = (unsigned)threads.size()] { member(t); });
      threads.back().detach();
    }
    job = &L, barrier = &blocks_barrier, busy = (unsigned)threads.size(), ++generation;
    wake.notify_all();
    idle.wait(hold, [&] { return busy == 0; });
    job = nullptr;
  }
};
#endif

struct Pool {  // OS threads that run blocks, made once per library and never ended
  std::mutex m;
  std::condition_variable wake, idle;
  Launch* job = nullptr;
  unsigned long generation = 0;
  int busy = 0;
  std::vector<std::thread> threads;
  std::mutex launching;  // one launch at a time (streams may call from several threads)

  void grow(int workers) {
    while ((int)threads.size() < workers - 1) {
      threads.emplace_back([this] { loop(); });
      threads.back().detach();
    }
  }
  void loop() {
    unsigned long seen = 0;
    for (;;) {
      Launch* L;
      {
        std::unique_lock<std::mutex> hold(m);
        wake.wait(hold, [&] { return generation != seen; });
        seen = generation;
        L = job;
      }
      if (L) work(*L);
      std::lock_guard<std::mutex> hold(m);
      if (--busy == 0) idle.notify_all();
    }
  }
  void run(Launch& L, int workers) {
    std::lock_guard<std::mutex> one(launching);
    int helpers = (int)std::min<unsigned long>(workers, L.blocks()) - 1;
    if (helpers > 0) {
      grow(workers);
      std::lock_guard<std::mutex> hold(m);
      job = &L, busy = (int)threads.size(), ++generation;
      wake.notify_all();
    }
    work(L);
    if (helpers > 0) {
      std::unique_lock<std::mutex> hold(m);
      idle.wait(hold, [&] { return busy == 0; });
      job = nullptr;
    }
  }
};

inline Pool& pool() {
  static Pool* one = new Pool;  // never destroyed: detached threads wait on it at exit
  return *one;
}

}  // namespace gf_emu

// One kernel's entry for the host: `args` holds the kernel's pointer arguments.
#define GF_KERNEL(name) \
  extern "C" void gf_tramp_##name(void** args) { gf_emu::call(name, args); }

// Runs a whole grid; returns 0, or 1 with the failure in `error`.
extern "C" int gf_emu_launch(gf_emu::Tramp tramp, void** args, const unsigned* grid,
                             const unsigned* block, int workers, int barriers, char* error,
                             int error_size) {
  gf_emu::Launch L;
  L.tramp = tramp, L.args = args;
  L.grid = dim3{grid[0], grid[1], grid[2]};
  L.block = dim3{block[0], block[1], block[2]};
  L.fibers = barriers ? 1 : 0;
#ifdef GF_EMU_THREADS
  static gf_emu::Team* team = new gf_emu::Team;  // never destroyed, as the pool
  static std::mutex one;
  std::lock_guard<std::mutex> hold(one);
  team->run(L);
#else
  gf_emu::pool().run(L, workers < 1 ? 1 : workers);
#endif
  if (!L.error.set) return 0;
  snprintf(error, error_size, "%s", L.error.text);
  return 1;
}
