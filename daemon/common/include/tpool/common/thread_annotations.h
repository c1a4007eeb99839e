// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html).
//
// They state which mutex guards which member and which functions must be
// called with it held; `make test` builds the daemon and the pool with clang
// and -Wthread-safety -Werror (the `tsa` preset), so a member read without its
// mutex is a compile error there. Under GCC they expand to nothing.
//
// libstdc++'s std::mutex carries no annotations, so annotated code uses
// tpool::Mutex, tpool::MutexLock and tpool::CondVar (tpool/common/mutex.h).
#pragma once

#if defined(__clang__)
#define TPOOL_TSA(x) __attribute__((x))
#else
#define TPOOL_TSA(x)
#endif

// Abseil (through gRPC) defines GUARDED_BY, PT_GUARDED_BY, ACQUIRED_AFTER,
// ACQUIRED_BEFORE and NO_THREAD_SAFETY_ANALYSIS too, with the same meaning
// (absl/base/internal/thread_annotations.h); a file that includes gRPC before
// this header would see them redefined. Ours replace them.
#undef GUARDED_BY
#undef PT_GUARDED_BY
#undef ACQUIRED_AFTER
#undef ACQUIRED_BEFORE
#undef NO_THREAD_SAFETY_ANALYSIS

// On a class: it is a capability (a mutex) named `x` in diagnostics.
#define CAPABILITY(x) TPOOL_TSA(capability(x))
// On a class: an RAII object that holds a capability for its lifetime.
#define SCOPED_CAPABILITY TPOOL_TSA(scoped_lockable)
// On a member: read or written only while holding `x`.
#define GUARDED_BY(x) TPOOL_TSA(guarded_by(x))
// On a pointer member: the pointee is guarded by `x`.
#define PT_GUARDED_BY(x) TPOOL_TSA(pt_guarded_by(x))
// On a mutex member: acquired after / before the named mutexes (lock order).
#define ACQUIRED_AFTER(...) TPOOL_TSA(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) TPOOL_TSA(acquired_before(__VA_ARGS__))
// On a function: the caller holds the capabilities (exclusively / shared).
#define REQUIRES(...) TPOOL_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) TPOOL_TSA(requires_shared_capability(__VA_ARGS__))
// On a function: it acquires / releases the capabilities.
#define ACQUIRE(...) TPOOL_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TPOOL_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) TPOOL_TSA(try_acquire_capability(__VA_ARGS__))
// On a function: the caller must NOT hold the capabilities (it takes them).
#define EXCLUDES(...) TPOOL_TSA(locks_excluded(__VA_ARGS__))
// On a function: asserts at run time that the capability is held.
#define ASSERT_CAPABILITY(x) TPOOL_TSA(assert_capability(x))
// On a function: returns a reference to the capability `x`.
#define RETURN_CAPABILITY(x) TPOOL_TSA(lock_returned(x))
// On a function: the analysis does not look inside. Every use says why.
#define NO_THREAD_SAFETY_ANALYSIS TPOOL_TSA(no_thread_safety_analysis)
