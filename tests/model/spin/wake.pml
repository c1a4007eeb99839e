/*
 * wake.pml: the pool's sleep/wake handshake as implemented in
 * daemon/pool/src/worker.cc (Pool::Impl::idle, next_task, work_visible) and
 * daemon/pool/src/submit.cc (Pool::Impl::enqueue, notify, wake_one).
 * docs/wake-protocol.md maps every step below to the code that implements it.
 *
 * It follows Julia's SchedulerWake.tla (JuliaLang/julia#61826): a worker
 * publishes "sleeping" BEFORE it re-checks the queues, and the waker scans
 * the per-worker sleep state. The pool adds: an awake count that lets a
 * waker skip the wake (coalescing), a park mutex + condition variable per
 * worker, producers that are not workers (gRPC threads, registered
 * submitters) as well as nested submits from inside a task, a LIFO stack
 * that only its owner drains (Config::lifo_capacity; 1 is the seed's LIFO
 * slot), and stealing between workers.
 *
 * Spin explores every sequentially consistent interleaving. The seq_cst
 * fences of the implementation (c2, w1) are what make the two racing sides
 * behave so (the store-buffering argument in docs/wake-protocol.md); they
 * need no statement here. Every other shared access is one Promela step, in
 * the implementation's order, except where a comment says why a group of
 * accesses is one step.
 *
 * Worker:
 *   find  next_task: LIFO stack, local queue, inject ring, then steal from
 *         the submitter queue and the other workers' local queues. After a
 *         pop from the stack that leaves entries in it, if a worker is
 *         asleep (a relaxed load of awake below the worker count: a hint,
 *         its own step), the older half goes to the local queue and the
 *         worker runs w1..w3 like any producer (the hand-out)
 *   task  the task may submit children (nested submit): into the stack if it
 *         is empty (the seed's slot), or if LIFO_CAP > 1 and no worker was
 *         seen asleep (the same hint, its own step), spilling the older half
 *         to the local queue first if the stack is full; else the local
 *         queue. A push that stays in the stack is not notified (nobody else
 *         may take it); any entry that reached the local queue is: w1..w3
 *         like any producer. With STALL, one task may then never return
 *         (a handler stuck for good; the watchdog's case)
 *   c1    sleep := sleeping; awake -= 1
 *   c2    (fence) re-check every queue the worker may drain, one per step;
 *         if one is non-empty: CAS sleeping -> running, and awake += 1 if
 *         the CAS succeeded (if it failed, a waker flipped and counted us)
 *   c3    lock; while sleeping: wait on the condvar; unlock; back to find
 * Waker (inline notify, after every successful push):
 *   w1    (fence), then load awake
 *   w2    coalescing, if B > 1 and awake > 0: skip unless ++tick % B == 0;
 *         tick is the producer's own (a worker's or a registered submitter's);
 *         a thread with no tick (a gRPC thread, the spill after an inject
 *         drain) counts 1 every time, so it always skips.
 *         Then skip if awake >= the number of workers (all awake).
 *   w3    wake_one: scan sleep states from a rotating hint (modelled as any
 *         start); the first successful CAS sleeping -> running: awake += 1,
 *         lock and unlock its park mutex, notify_one; nobody asleep: nothing
 *         (the pool would start another worker below max_threads; this
 *         model runs max_threads = 3 workers from the start)
 *
 * Known-bad variants (each must be rejected by the checker):
 *   -DBUGGY_RECHECK_FIRST       re-check the queues before publishing
 *                               sleeping (c2 before c1)
 *   -DBUGGY_COUNT_AFTER_RECHECK leave the awake count at c3, after the
 *                               re-check, as Julia's MCBuggy does with
 *                               n_threads_running, while the waker still
 *                               skips the wake on awake > 0
 *   -DBUGGY_NOTIFY_UNLOCKED     wake_one notifies without taking the park
 *                               mutex, so its notify can fall between the
 *                               worker's check of sleep and its wait
 *   -DBUGGY_NO_WAKER_FENCE      a gRPC thread's push has no fence before the
 *                               load of awake (w1): the push may become
 *                               visible after the load. (A missing fence at
 *                               c2 is BUGGY_RECHECK_FIRST: the store of
 *                               sleeping may become visible after the
 *                               re-check's loads.)
 *   -DBUGGY_GATE_NO_CHAIN_WAKE  (GATE, STALL) the last searcher to take a
 *                               task does not wake one more: a second task
 *                               whose wake was skipped on its count waits
 *                               behind the first, for ever if that one
 *                               never returns
 *   -DBUGGY_GATE_NO_RESEARCH    (GATE, STALL) a worker back from idle() after
 *                               its re-check found work does not count itself
 *                               searching again: it may have taken a wake
 *                               meant for another task, and nobody passes it on
 *   -DBUGGY_GATE_LEAVE_AFTER_RECHECK (GATE) a searcher that gives up leaves
 *                               the count after its re-check: a producer that
 *                               read the count before the decrement skips its
 *                               wake and the re-check missed its task
 *   -DBUGGY_HANDOUT_NO_NOTIFY   (with STALL) the hand-out moves the stack's
 *                               older half to the local queue without w1..w3:
 *                               the sleeper it was meant for stays parked,
 *                               and if the owner's task then never returns
 *                               the entries are stranded
 *
 * Properties:
 *   safe  at every state where no producer is between its push and the end
 *         of its wake step (ghost inflight == 0): if any queue is non-empty,
 *         some worker is not parked, and a non-empty LIFO slot's owner is not
 *         parked (nobody else may drain it). Check: ./pan -N safe
 *   live  under weak fairness, whenever a task is queued the queues
 *         eventually drain; the producers are finite, so every queued task
 *         is consumed. Check: ./pan -a -f -N live
 *   safe, with STALL: at every state where no producer is in flight, if a
 *         queue other workers may drain (inject, submitter, local queues) is
 *         non-empty, some worker is neither parked nor stuck in a task that
 *         never returns. Entries in a stuck owner's stack are excluded: the
 *         stack hides them by design (docs/algorithms.md, "The owner's LIFO
 *         stack"); what must never be hidden is work that left it. Holds
 *         with B = 1 only: coalescing skips the wake while the stuck worker
 *         counts as awake, which is the watchdog's case (lanes.pml).
 *
 * Tunables (-D on the spin command line): B (wake_coalesce_batch),
 * EXTERNAL_TASKS (pushed by the non-worker producer), NESTED (children that
 * tasks submit, in total), LIFO_CAP (lifo_capacity: 1 is the seed's slot; 2
 * is enough for a spill and a hand-out), STALL (one task may never return),
 * GLOBAL_QUEUE (the global_queue scheduler variant: no LIFO stacks or local
 * queues, every push goes to the inject ring and workers drain only it),
 * GATE (Config::searching_gate, pool_internal.h inv 7: a worker counts in
 * `searching` from a scan that found nothing until it takes a task or gives
 * up, and from every return from idle(); it gives up by leaving the count
 * before c1; a producer skips w3 while searching > 0; the last searcher to
 * take a task runs w1 and w3 itself, not coalesced and not gated).
 *
 * Not modelled here: shutdown and overflow-worker retirement (lanes.pml
 * models retirement and the exit path), spurious condvar wakeups (the wait
 * loop checks again and waits again), the lanes (lanes.pml: workers that
 * drain both lanes, producers of the other lane, the watchdog), and the
 * non-empty-worker bitmap (a hint for stealers; the re-check reads every
 * queue, not the bitmap), and the spill after an inject drain or a steal (a
 * worker moving tasks into its own local queue: it is awake and takes them
 * itself, as after a nested submit).
 */

#define NW 3 /* workers = max_threads; QUEUED and friends are spelled out for 3 */

#ifndef B
#define B 2
#endif
#ifndef EXTERNAL_TASKS
#define EXTERNAL_TASKS 1
#endif
#ifndef NESTED
#define NESTED 1
#endif
#ifndef LIFO_CAP
#define LIFO_CAP 1
#endif

#define RUNNING 0
#define SLEEPING 1
#define NO_TICK 255 /* notify(lane, nullptr) */

/* ---- pool state -------------------------------------------------------- */
bit sleep[NW];   /* Worker::sleep; all start running */
short awake = NW; /* Pool::Impl::awake[lane]; signed: a flip's +1 may land
                     after the flipped worker's next -1 */

#ifdef GATE
short searching = 0; /* Pool::Impl::searching[lane] (Config::searching_gate) */
#endif

/* Queues, as task counts: which task sits where does not matter to the
 * handshake, only whether a queue that a worker may drain is empty. */
byte inject = 0; /* the lane's inject ring */
byte subq = 0;   /* one registered submitter's queue (stealable) */
byte lifo[NW];   /* entries in worker i's LIFO stack: only worker i touches it */
byte lq[NW];     /* worker i's local queue: owner pushes and pops, others steal */

/* Park condition variable of each worker (its mutex: see c3). */
bit waiting[NW];   /* blocked in park_cv.wait */
bit signalled[NW]; /* a notify_one reached the waiter, not yet consumed */

/* ---- ghost state (not in the implementation) --------------------------- */
byte inflight = 0; /* producers between their push and the end of notify */
byte nested_left = NESTED;
bit stuck[NW];     /* STALL: the worker is in a task that never returns */
bit stall_left = 1;

#define SHARED (inject + subq + lq[0] + lq[1] + lq[2])
#define QUEUED (SHARED + lifo[0] + lifo[1] + lifo[2])
#define PARKED(i) (waiting[i] && !signalled[i])
#define ALL_PARKED (PARKED(0) && PARKED(1) && PARKED(2))
#define LIFO_OWNER_PARKED ((lifo[0] > 0 && PARKED(0)) || (lifo[1] > 0 && PARKED(1)) || \
                           (lifo[2] > 0 && PARKED(2)))
#define OUT(i) (PARKED(i) || stuck[i])
#define ALL_OUT (OUT(0) && OUT(1) && OUT(2))

#ifdef STALL
ltl safe { [] (inflight == 0 -> !((SHARED > 0 && ALL_OUT) || LIFO_OWNER_PARKED)) }
#else
ltl safe { [] (inflight == 0 -> !((QUEUED > 0 && ALL_PARKED) || LIFO_OWNER_PARKED)) }
#endif
ltl live { [] ((QUEUED > 0) -> <> (QUEUED == 0)) }

/* Pool::Impl::notify and wake_one, run by a producer right after its push
 * (which did inflight++): decide (w1, w2), then wake (w3). tick: the
 * producer's own counter, or NO_TICK. Uses the caller's locals up and j
 * (scan position). */
inline decide(tick) {
#ifdef GATE
  /* w2 with the gate: after w1's fence, one load of searching; skip the wake
   * while a worker is searching (it will find the work, or re-check after
   * it leaves the count, or wake another when it was the last). */
  gated = (searching > 0);
#endif
  /* w1: fence, then one load of awake. w2 decides on that load and on the
   * producer's own tick (thread-local), so w1 and w2 are one step. j == NW
   * means "no wake". */
  atomic {
    up = awake;
    if
    :: B > 1 && up > 0 ->
       if
       :: tick == NO_TICK -> j = NW /* ++local_tick is 1 */
       :: else ->
          tick = (tick + 1) % B;
          if :: tick != 0 -> j = NW :: else fi
       fi
    :: else
    fi;
    if :: up >= NW -> j = NW :: else fi; /* all awake */
#ifdef GATE
    if :: gated -> j = NW :: else fi;
    gated = 0;
#endif
    if
    :: j == NW -> inflight--
    :: else -> select(j : 0 .. NW - 1) /* w3: wake_hint.fetch_add % n */
    fi;
    up = 0
  }
}

inline notify(tick) {
  decide(tick);
  wake()
}

/* w3, after the decision of w1..w2 left j == NW (no wake) or a start. */
inline wake() {
  if
  :: j == NW -> j = 0
  :: else ->
     /* w3: for each worker from the hint: load sleep, CAS sleeping ->
      * running. A load that sees running and the CAS that fails on it both
      * mean "next", so the pair is one step. */
     if
     :: atomic { sleep[j] == SLEEPING -> sleep[j] = RUNNING }
     :: else ->
        if
        :: atomic { sleep[(j + 1) % NW] == SLEEPING ->
                    sleep[(j + 1) % NW] = RUNNING; j = (j + 1) % NW }
        :: else ->
           if
           :: atomic { sleep[(j + 2) % NW] == SLEEPING ->
                       sleep[(j + 2) % NW] = RUNNING; j = (j + 2) % NW }
           :: else -> j = NW /* nobody asleep */
           fi
        fi
     fi;
     if
     :: j == NW -> atomic { inflight--; j = 0 }
     :: else ->
        awake++;
        /* lock_guard(park_mu) then park_cv.notify_one(). Taking the mutex
         * after the CAS means the worker is either before its check of sleep
         * (it will see running) or inside wait (it gets the notify): see c3.
         * notify_one is a no-op if the worker does not wait. */
        atomic { signalled[j] = waiting[j]; inflight--; j = 0 }
     fi
  fi
}

/* work_visible: the re-check of c2 (in BUGGY_RECHECK_FIRST, the check before
 * c1), one queue per step in the implementation's order: inject ring, own
 * LIFO slot and local queue (the slot is owner-only, so that read is ours
 * alone and shares the step), submitter queues, every other worker's local
 * queue by index. Sets the caller's local found. */
inline work_visible() {
#ifdef GLOBAL_QUEUE
  if :: inject > 0 -> found = 1 :: else fi
#else
  if
  :: inject > 0 -> found = 1
  :: else ->
     if
     :: lifo[me] > 0 || lq[me] > 0 -> found = 1
     :: else ->
        if
        :: subq > 0 -> found = 1
        :: else ->
           if
           :: lq[(me == 0 -> 1 : 0)] > 0 -> found = 1
           :: else ->
              if
              :: lq[(me == 2 -> 1 : 2)] > 0 -> found = 1
              :: else -> skip
              fi
           fi
        fi
     fi
  fi
#endif
}

proctype Worker(byte me) {
  byte tick = 0; /* Worker::submit_tick */
  byte j;
  short up;
  bit found;
  bit popped; /* find took from the stack */
  bit sleeper; /* the relaxed hint: awake < NW when it was read */
  bit shared;  /* the nested push put an entry where others can take it */
  bit gated;   /* decide(): searching > 0 when it was read */
  bit srch;    /* GATE: this worker counts in searching */
  bit last;    /* GATE: it was the last searcher when it found a task */
find:
  /* next_task, one step: its only effect on the handshake is whether it
   * took a task, and a scan that misses work pushed behind it goes on to c1
   * and c2, whose re-check is modelled one queue per step. */
#ifdef GLOBAL_QUEUE
  atomic { if :: inject > 0 -> inject-- :: else -> goto nothing fi };
#else
  atomic {
    if
    :: lifo[me] > 0 -> lifo[me]--; popped = 1
    :: else ->
       if
       :: lq[me] > 0 -> lq[me]--
       :: else ->
          if
          :: inject > 0 -> inject--
          :: else ->
             if
             :: subq > 0 -> subq--
             :: else ->
                if
                :: lq[(me + 1) % NW] > 0 -> lq[(me + 1) % NW]--
                :: else ->
                   if
                   :: lq[(me + 2) % NW] > 0 -> lq[(me + 2) % NW]--
                   :: else -> goto nothing
                   fi
                fi
             fi
          fi
       fi
    fi
  };
#endif
#ifdef GATE
  /* Found a task: leave the count. The last searcher to leave wakes one more
   * worker (Go's resetspinning -> wakep): w1, the all-awake early-out, w3,
   * without coalescing or the gate. Without it, a producer that skipped its
   * wake on our count would have its task wait behind the one we run. */
  if
  :: srch -> atomic { searching--; srch = 0; last = (searching == 0) };
     if
#ifndef BUGGY_GATE_NO_CHAIN_WAKE
     :: last ->
        atomic {
          inflight++;
          up = awake;
          if :: up >= NW -> j = NW :: else -> select(j : 0 .. NW - 1) fi;
          if :: j == NW -> inflight-- :: else fi;
          up = 0
        };
        wake()
#endif
     :: else
     fi;
     last = 0
  :: else
  fi;
#endif
#ifndef GLOBAL_QUEUE
  /* The hand-out (next_task): the hint, then the move and the wake. The
   * move of the older half is one step (owner-only stack, then one
   * push_many into the local queue). */
  if
  :: popped && lifo[me] > 0 ->
     sleeper = (awake < NW);
     if
     :: sleeper ->
        atomic { lq[me] = lq[me] + (lifo[me] + 1) / 2; lifo[me] = lifo[me] / 2; inflight++ };
#ifdef BUGGY_HANDOUT_NO_NOTIFY
        inflight--
#else
        notify(tick)
#endif
     :: else
     fi
  :: else
  fi;
  popped = 0;
  sleeper = 0;
#endif
  /* run_task: the task may submit children (enqueue: see the header),
   * a push that left the stack followed by notify with our own tick. */
  do
#ifdef GLOBAL_QUEUE
  :: atomic { nested_left > 0 -> nested_left--; inject++; inflight++ };
     notify(tick)
#else
  :: nested_left > 0 ->
     sleeper = (awake < NW); /* the hint, read on every nested submit */
     atomic {
       if
       :: nested_left > 0 ->
          nested_left--;
          if
          :: lifo[me] == 0 -> lifo[me] = 1 /* the seed's slot: not notified */
          :: lifo[me] > 0 && LIFO_CAP > 1 && !sleeper && lifo[me] < LIFO_CAP -> lifo[me]++
          :: lifo[me] > 0 && LIFO_CAP > 1 && !sleeper && lifo[me] == LIFO_CAP ->
             /* full: its older half to the local queue, then the push */
             lq[me] = lq[me] + lifo[me] / 2;
             lifo[me] = lifo[me] - lifo[me] / 2 + 1;
             shared = 1;
             inflight++
          :: else -> lq[me]++; shared = 1; inflight++
          fi
       :: else /* another task took the last one meanwhile */
       fi;
       sleeper = 0
     };
     if
     :: shared -> shared = 0; notify(tick)
     :: else
     fi
#endif
  :: else -> break
  od;
#ifdef STALL
  if
  :: atomic { stall_left -> stall_left = 0; stuck[me] = 1 }; goto stuck_forever
  :: true /* or it returns: either, whichever task it is */
  fi;
#endif
  goto find;
#ifdef STALL
stuck_forever:
end_stuck:
  false; /* a handler that never returns: this worker takes no further step */
#endif

nothing: /* next_task found nothing */
#ifdef GATE
  /* The worker counts itself searching and scans once more (the steal
   * round of Pool::Impl::search) before it gives up. */
  if :: !srch -> atomic { searching++; srch = 1 }; goto find :: else fi;
#endif
idle: /* Pool::Impl::idle */
#if defined(GATE) && !defined(BUGGY_GATE_LEAVE_AFTER_RECHECK)
  /* Giving up: leave the searching count before c1, so c2's fence orders the
   * decrement before the re-check (the store-buffering argument, as for
   * awake). */
  if :: srch -> atomic { searching--; srch = 0 } :: else fi;
#endif
#ifdef BUGGY_RECHECK_FIRST
  work_visible();
  if :: found -> found = 0; goto find :: else fi;
  sleep[me] = SLEEPING;
  awake--;
  goto park;
#else
  /* c1 */
  sleep[me] = SLEEPING;
#ifndef BUGGY_COUNT_AFTER_RECHECK
  awake--;
#endif
  /* c2: seq_cst fence (pairs with w1), then the re-check */
  work_visible();
#if defined(GATE) && defined(BUGGY_GATE_LEAVE_AFTER_RECHECK)
  /* Bug: the searching count is left after the re-check. */
  if :: srch -> atomic { searching--; srch = 0 } :: else fi;
#endif
  if :: found -> found = 0; goto abort_sleep :: else fi;
#ifdef BUGGY_COUNT_AFTER_RECHECK
  awake--;
#endif
  goto park;

abort_sleep:
  if
  :: atomic { sleep[me] == SLEEPING -> sleep[me] = RUNNING };
#ifndef BUGGY_COUNT_AFTER_RECHECK
     awake++
#endif
  :: else -> /* a waker flipped us back and counted us */
#ifdef BUGGY_COUNT_AFTER_RECHECK
     awake-- /* we never left the count: undo the double count */
#else
     skip
#endif
  fi;
#ifdef BUGGY_GATE_NO_RESEARCH
  goto find;
#else
  goto resume;
#endif
#endif

park:
  /* c3: lock park_mu; park_cv.wait(lk, [] { sleep == running }); unlock.
   * The waker flips sleep before it takes park_mu, and notifies after it
   * released it; the worker holds park_mu from its check of sleep until
   * wait releases it. So no notify can fall between the check and the wait:
   * to the waker the two are one step. A notify always follows a flip to
   * running and only this worker sets sleeping, so after a wake the check
   * is false and the worker goes back to next_task. */
#ifdef BUGGY_NOTIFY_UNLOCKED
  if /* no mutex on the waker's side: check and wait are two steps */
  :: sleep[me] == SLEEPING -> waiting[me] = 1
  :: else -> goto resume
  fi;
#else
  atomic {
    if
    :: sleep[me] == SLEEPING -> waiting[me] = 1
    :: else -> goto find
    fi
  };
#endif
end_parked:
  atomic { signalled[me] -> signalled[me] = 0; waiting[me] = 0 };
resume: /* back from idle(), woken or not */
#ifdef GATE
  /* Every return from idle() counts the worker searching again before it
   * looks (Go: a woken M starts spinning; findrunnable's "if wasSpinning {
   * becomeSpinning() }" after its re-check found work). A producer may have
   * skipped its wake on our count, or we may have absorbed a wake meant for
   * a task other than the one we take: leaving the count as the last
   * searcher when we take it then wakes one more. */
  atomic { searching++; srch = 1 };
#endif
  goto find
}

/* The producer that is not a worker. Each push is either a gRPC thread's
 * (inject ring, notify with no tick) or a registered submitter's (its own
 * queue, notify with its tick): one process plays both to keep the state
 * space small. */
active proctype External() {
  byte tick = 0; /* Submitter::submit_tick */
  byte j;
  short up;
  byte left = EXTERNAL_TASKS;
  byte none = NO_TICK;
  bit gated;
  do
#ifdef BUGGY_NO_WAKER_FENCE
  /* No fence between the push and the load of awake: the push may become
   * visible only after that load (a store buffer), i.e. after w1..w2. */
  :: left > 0 -> atomic { left--; inflight++ }; decide(none); inject++; wake()
#else
  :: left > 0 -> atomic { left--; inject++; inflight++ }; notify(none)
#endif
#ifdef GLOBAL_QUEUE
  :: left > 0 -> atomic { left--; inject++; inflight++ }; notify(tick)
#else
  :: left > 0 -> atomic { left--; subq++; inflight++ }; notify(tick)
#endif
  :: else -> break
  od
}

init {
  atomic {
    run Worker(0);
    run Worker(1);
    run Worker(2)
  }
}
