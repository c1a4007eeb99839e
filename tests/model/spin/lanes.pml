/*
 * lanes.pml: the pool's sleep/wake handshake across two lanes, with
 * workers that drain both, producers that are not workers of the lane they
 * submit to, an overflow worker that the watchdog starts and retires (so a
 * worker exits in the middle of the protocol), tasks that never end, and the
 * watchdog's stall rule. wake.pml checks one lane in detail (LIFO slots,
 * submitter queues, three workers of one lane); this model checks what lanes
 * add. docs/wake-protocol.md ("Lanes") maps every step to the code.
 *
 * Code: daemon/pool/src/worker.cc (next_task, idle, work_visible,
 * worker_main's exit path), submit.cc (enqueue, notify, wake_one),
 * construct.cc (Impl::Impl: which lanes a worker drains), watchdog.cc (tick: the stall
 * rule, overflow spawn, the tick's wake, retire).
 *
 * Workers (lane_extension, blocking_workers = 1, max_threads = 2,
 * cpu_helps_blocking off, max_overflow_workers = 1):
 *   W0  the blocking worker: its lane is K (blocking); drains K, then D
 *   W1  the default worker: lane D; drains D only
 *   O   (index 2) the overflow worker: lane D; drains D, then K. Started by
 *       the watchdog while a worker is stalled, told to retire when parked;
 *       it may be started again after it exited.
 * Queues, as task counts: inject[D], inject[K], and each worker's local
 * queue lq[w] (tasks of the worker's lane: an owner pushes its nested
 * submits of its own lane there, other workers of a lane that drain it
 * steal; a worker helping the other lane takes one task, never a batch, so
 * its queue never holds the other lane's tasks: worker.cc inv 6, which the
 * code broke until 2026-12-07). LIFO slots and submitter queues are in
 * wake.pml.
 *
 * Every step is one shared access in the implementation's order, as in
 * wake.pml (which explains the fences that make Spin's sequentially
 * consistent steps sound: c2 and w1), except where a comment says why a
 * group is one step.
 *
 * Worker:
 *   find  next_task, one step, in the code's order: own local queue, own
 *         lane's inject ring, steal from the own lane's workers; then the
 *         other lane if drained: its inject ring, steal from its workers
 *   task  a core worker may get stuck on a default-lane task for good (a
 *         handler that spins; ghost budget RUNAWAY); else the task may
 *         submit one child to either lane (its own local queue if the lane
 *         is its own, else the lane's inject ring), then notify(lane)
 *   c1    sleep := sleeping; awake[D] -= 1; awake[K] -= 1 (each lane it
 *         drains, in lane order, one step each)
 *   c2    read retire (O); re-check every queue it drains, one per step;
 *         exiting or found: CAS sleeping -> running, then awake[l] += 1 per
 *         lane if the CAS won; exiting: exit path, else find
 *   c3    under park_mu: wait until running (or retire); then CAS sleeping
 *         -> running (won: woken by retire, count itself back in); retire:
 *         exit path, else find
 *   exit  (O) awake[l] -= 1 per lane; fence; re-check; if it saw work:
 *         wake_one(l) for each lane it drains; exited
 * Producer notify(l) (External: gRPC threads, no tick; a worker's nested
 * submit: its own tick):
 *   w1    fence, load awake[l]
 *   w2    coalescing (B > 1, awake[l] > 0: skip unless ++tick % B == 0);
 *         skip if awake[l] >= started + overflow_active (all awake)
 *   w3    wake_one(l): from any start, the first worker that drains l whose
 *         CAS sleeping -> running succeeds; awake[x] += 1 for each lane x it
 *         drains; notify under its park_mu
 * Watchdog tick, forever, in the code's order (each part one step: tick()
 * holds spawn_mu and is not part of the lost-wakeup argument):
 *   stall   a worker is stalled when it is stuck on a task, except the
 *           blocking worker on a blocking-lane task; if any is and O is not
 *           running: start O (awake += 1 per lane it drains, as start_worker)
 *   wake    for each lane with queued work: wake_one(l)
 *   retire  O parked: retire := 1 and notify, under its park_mu
 *
 * Known-bad variants (each must be rejected):
 *   -DBUGGY_OTHER_LANE_AWAKE   notify(l) reads the other lane's awake count
 *   -DBUGGY_POOL_AWAKE         notify(l) reads a pool-wide awake count (one
 *                              per worker whatever it drains)
 *   -DBUGGY_WAKE_ANY_WORKER    wake_one(l) wakes a sleeper that does not
 *                              drain l
 *   -DBUGGY_EXIT_NO_RECHECK    a retiring worker leaves the awake counts
 *                              and exits without the re-check and wake
 *   -DBUGGY_OLD_STALL_RULE     the watchdog counts only default-lane workers
 *                              (the rule before issue 13 item 2)
 *   -DBUGGY_OVERFLOW_DEFAULT_ONLY  overflow workers drain only the default
 *                              lane (the other half of that old rule)
 * The first four lose a wakeup (claim safe); the last two starve the
 * blocking lane behind a stuck blocking worker (claim live).
 *
 * Properties:
 *   safe  at every state where no producer is between its push and the end
 *         of its notify: for each lane, if it has queued work, some worker
 *         that drains it (and is running: O may be gone) is not parked.
 *         A stuck worker is not parked, so this says nothing of stalls.
 *   live  under weak fairness, queued work is eventually all consumed,
 *         although RUNAWAY tasks never end: the stall rule and the overflow
 *         worker serve the lane whose workers are stuck.
 *
 * Tunables: B (wake_coalesce_batch), EXT (external pushes, each to either
 * lane), NESTED (children submitted by tasks, in all), RUNAWAY (tasks that
 * never end; only default-lane tasks on core workers, and O never gets
 * stuck: it stands for the overflow workers that are not stuck, i.e. the
 * model assumes max_overflow_workers exceeds the number of stuck tasks).
 */

#define D 0
#define K 1
#define NW 3 /* W0, W1, O */
#define OV 2

#ifndef B
#define B 2
#endif
#ifndef EXT
#define EXT 2
#endif
#ifndef NESTED
#define NESTED 1
#endif
#ifndef RUNAWAY
#define RUNAWAY 1
#endif
#ifndef TICK_WAKES
#define TICK_WAKES 1
#endif

#define RUNNING 0
#define SLEEPING 1
#define NO_TICK 255

#ifdef BUGGY_OVERFLOW_DEFAULT_ONLY
#define O_DRAINS_K 0
#else
#define O_DRAINS_K 1
#endif
/* Impl::Impl: every worker drains D; W0 drains K (its lane); O drains K. */
#define DRAINS(w, l) ((l) == D || (w) == 0 || ((w) == OV && O_DRAINS_K))
#define LANE_OF(w) ((w) == 0 -> K : D)
#ifdef BUGGY_WAKE_ANY_WORKER
#define CAN_WAKE(w, l) 1
#else
#define CAN_WAKE(w, l) DRAINS(w, l)
#endif
#ifdef BUGGY_OLD_STALL_RULE
#define STALLED(w) (stuck[w] && LANE_OF(w) == D)
#else
#define STALLED(w) (stuck[w] && !(LANE_OF(w) == K && stuck_lane[w] == K))
#endif

/* ---- pool state -------------------------------------------------------- */
bit sleep[NW];              /* Worker::sleep; all start running */
short awake[2] = 0;         /* Pool::Impl::awake[lane]; set in init */
short awake_all = 0;        /* BUGGY_POOL_AWAKE's count: one per awake worker */
byte inject[2];             /* the lanes' inject rings */
byte lq[NW];                /* local queues; lq[w] holds tasks of LANE_OF(w) */
bit waiting[NW];            /* inside park_cv.wait */
bit signalled[NW];          /* a notify reached the waiter */
bit alive[NW];              /* started, not exited (W0, W1 always) */
bit retire = 0;             /* O told to retire (Worker::retire) */

/* ---- ghost state ------------------------------------------------------- */
bit stuck[NW];              /* running a task that never ends */
bit stuck_lane[NW];         /* the lane of that task (the TaskStamp's lane) */
byte inflight = 0;          /* producers between push and the end of notify */
byte nested_left = NESTED;
byte runaway_left = RUNAWAY;

#define QD (inject[D] + lq[1] + lq[2])
#define QK (inject[K] + lq[0])
#define QUEUED(l) ((l) == D -> QD : QK)
#define PARKED(i) ((waiting[i] && !signalled[i]) || !alive[i])
#define ALL_PARKED_D (PARKED(0) && PARKED(1) && PARKED(OV))
#define ALL_PARKED_K (PARKED(0) && (!O_DRAINS_K || PARKED(OV)))
#define NALIVE (alive[0] + alive[1] + alive[OV]) /* started + overflow_active */

ltl safe { [] (inflight == 0 -> !((QD > 0 && ALL_PARKED_D) || (QK > 0 && ALL_PARKED_K))) }
ltl live { [] ((QD + QK > 0) -> <> (QD + QK == 0)) }

/* Count worker w in (dir = 1) or out of (dir = -1) the awake count of every
 * lane it drains: one fetch_add/fetch_sub per lane, lane order. */
inline count(w, dir) {
  atomic { awake[D] = awake[D] + dir; awake_all = awake_all + dir };
  if :: DRAINS(w, K) -> awake[K] = awake[K] + dir :: else fi
}

/* wake_one(l): scan from any start (wake_hint); the first worker that may
 * run l whose CAS sleeping -> running wins is counted in and notified under
 * its park mutex. A load that sees running and a failed CAS both mean
 * "next", so they are one step. Leaves j = NW if nobody was asleep. Uses
 * the caller's j and k. */
inline wake_one(l) {
  k = 0;
  do
  :: k == NW -> j = NW; break
  :: k < NW ->
     atomic {
       if
       :: CAN_WAKE(j, l) && sleep[j] == SLEEPING ->
          sleep[j] = RUNNING; k = NW + 1; inflight++ /* a waker in flight until its notify */
       :: else -> j = (j + 1) % NW; k++
       fi
     }
  :: k > NW -> break
  od;
  if
  :: j < NW ->
     count(j, 1);
     atomic { signalled[j] = waiting[j]; inflight-- } /* lock park_mu; unlock; notify_one */
  :: else
  fi;
  k = 0
}

/* The tick's wake_one(l), in one step: the first sleeper (from index 0)
 * that drains l. */
#define TICK_WAKE(l, q) \
  if \
  :: (q) > 0 && CAN_WAKE(0, l) && sleep[0] == SLEEPING -> \
     sleep[0] = RUNNING; awake[D]++; awake_all++; awake[K]++; signalled[0] = waiting[0] \
  :: else -> \
     if \
     :: (q) > 0 && CAN_WAKE(1, l) && sleep[1] == SLEEPING -> \
        sleep[1] = RUNNING; awake[D]++; awake_all++; signalled[1] = waiting[1] \
     :: else -> \
        if \
        :: (q) > 0 && CAN_WAKE(OV, l) && sleep[OV] == SLEEPING -> \
           sleep[OV] = RUNNING; awake[D]++; awake_all++; \
           if :: O_DRAINS_K -> awake[K]++ :: else fi; \
           signalled[OV] = waiting[OV] \
        :: else \
        fi \
     fi \
  fi

/* Pool::Impl::notify(l, tick) after a push (which did inflight++). */
inline notify(l, tick) {
  /* w1 + w2: one load of awake (after the fence), then the producer's own
   * tick: one step. j == NW means "no wake". */
  atomic {
#if defined(BUGGY_OTHER_LANE_AWAKE)
    up = awake[1 - l];
#elif defined(BUGGY_POOL_AWAKE)
    up = awake_all;
#else
    up = awake[l];
#endif
    j = 0;
    if
    :: B > 1 && up > 0 ->
       if
       :: tick == NO_TICK -> j = NW
       :: else ->
          tick = (tick + 1) % B;
          if :: tick != 0 -> j = NW :: else fi
       fi
    :: else
    fi;
    if :: up >= NALIVE -> j = NW :: else fi;
    if
    :: j == NW -> inflight--
    :: else -> select(j : 0 .. NW - 1) /* wake_hint */
    fi;
    up = 0
  };
  if
  :: j == NW -> j = 0
  :: else ->
     wake_one(l);
     atomic { inflight--; j = 0 }
  fi
}

/* work_visible: every queue this worker drains, one per step: the inject
 * rings (lane order), its own local queue, the other workers' local queues
 * of the lanes it drains (by index). Sets found. */
inline check(q) {
  atomic { if :: !found -> found = ((q) > 0) :: else fi }
}

inline work_visible() {
  if
  :: me == 0 ->
     atomic { found = (inject[D] > 0) };
     check(inject[K]);
     check(lq[0]);
     check(lq[1]);
     check(lq[2])
  :: me == 1 ->
     atomic { found = (inject[D] > 0) };
     check(lq[1]);
     check(lq[2])
  :: me == OV ->
     atomic { found = (inject[D] > 0) };
     if :: O_DRAINS_K -> check(inject[K]) :: else fi;
     check(lq[2]);
     if :: O_DRAINS_K -> check(lq[0]) :: else fi;
     check(lq[1])
  fi
}

proctype Worker(byte me) {
  byte tick = 0; /* Worker::submit_tick */
  byte j = 0;
  byte k = 0;
  short up = 0;
  bit found = 0;
  bit exiting = 0;
  byte l = 0;  /* lane of the task taken */
  byte cl = 0; /* lane of a child */
begin:
  if
  :: me == OV ->
end_dormant: /* not started; start_worker sets alive and counts it in */
     alive[OV] == 1
  :: else
  fi;
find:
  /* next_task, one step (as in wake.pml: a scan that misses a push goes on
   * to c1/c2, whose re-check is one queue per step). */
  atomic {
    if
    :: me == 0 ->
       if
       :: lq[0] > 0 -> lq[0]--; l = K
       :: else ->
          if
          :: inject[K] > 0 -> inject[K]--; l = K
          :: else ->
             if
             :: inject[D] > 0 -> inject[D]--; l = D
             :: else ->
                if
                :: lq[1] > 0 -> lq[1]--; l = D
                :: else ->
                   if :: lq[2] > 0 -> lq[2]--; l = D :: else -> goto idle fi
                fi
             fi
          fi
       fi
    :: me == 1 ->
       if
       :: lq[1] > 0 -> lq[1]--; l = D
       :: else ->
          if
          :: inject[D] > 0 -> inject[D]--; l = D
          :: else ->
             if :: lq[2] > 0 -> lq[2]--; l = D :: else -> goto idle fi
          fi
       fi
    :: me == OV ->
       if
       :: lq[2] > 0 -> lq[2]--; l = D
       :: else ->
          if
          :: inject[D] > 0 -> inject[D]--; l = D
          :: else ->
             if
             :: lq[1] > 0 -> lq[1]--; l = D
             :: else ->
                if
                :: O_DRAINS_K && inject[K] > 0 -> inject[K]--; l = K
                :: else ->
                   if :: O_DRAINS_K && lq[0] > 0 -> lq[0]--; l = K :: else -> goto idle fi
                fi
             fi
          fi
       fi
    fi
  };
  /* run_task: a handler that never returns (run_task's TaskStamp says which
   * lane the task is in), or a task that may submit a child. */
  if
  :: atomic { me != OV && l == D && runaway_left > 0 ->
              runaway_left--; stuck_lane[me] = l; stuck[me] = 1 };
end_stuck:
     false
  :: skip
  fi;
  if
  :: atomic { nested_left > 0 ->
              nested_left--;
              if :: cl = D :: cl = K fi;
              /* enqueue: own local queue if the lane is the worker's own,
               * else the lane's inject ring */
              if :: cl == LANE_OF(me) -> lq[me]++ :: else -> inject[cl]++ fi;
              inflight++ };
     notify(cl, tick)
  :: else
  fi;
  goto find;

idle: /* Pool::Impl::idle */
  /* c1 */
  sleep[me] = SLEEPING;
  count(me, -1);
  /* c2: fence, then read retire and re-check */
  exiting = (me == OV && retire);
  work_visible();
  if
  :: exiting || found ->
     if
     :: atomic { sleep[me] == SLEEPING -> sleep[me] = RUNNING }; count(me, 1)
     :: else /* a waker flipped us and counted us */
     fi;
     found = 0;
     if :: exiting -> goto exit_path :: else -> goto find fi
  :: else
  fi;
  /* c3: the check of sleep (and retire) and the start of the wait are one
   * step to the waker, which flips sleep or sets retire before it takes
   * park_mu (wake.pml, c3). */
  atomic {
    if
    :: sleep[me] == SLEEPING && !(me == OV && retire) -> waiting[me] = 1
    :: else -> goto woken
    fi
  };
end_parked:
  atomic { signalled[me] -> signalled[me] = 0; waiting[me] = 0 };
woken:
  if
  :: atomic { sleep[me] == SLEEPING -> sleep[me] = RUNNING }; count(me, 1) /* woken by retire */
  :: else
  fi;
  if :: me == OV && retire -> goto exit_path :: else -> goto find fi;

exit_path: /* worker_main after the loop: leave the count, fence, re-check */
  count(me, -1);
#ifndef BUGGY_EXIT_NO_RECHECK
  work_visible();
  if
  :: found ->
     select(j : 0 .. NW - 1);
     wake_one(D);
     if :: DRAINS(me, K) -> select(j : 0 .. NW - 1); wake_one(K) :: else fi
  :: else
  fi;
#endif
  atomic { found = 0; exiting = 0; tick = 0; j = 0; k = 0; l = 0; cl = 0; alive[OV] = 0 };
  goto begin
}

/* Threads that are not workers (gRPC threads): pushes into either lane's
 * inject ring, no tick. */
proctype External() {
  byte j = 0;
  byte k = 0;
  short up = 0;
  byte left = EXT;
  byte none = NO_TICK;
  byte cl = 0;
  do
  :: left > 0 ->
     atomic { left--; if :: cl = D :: cl = K fi; inject[cl]++; inflight++ };
     notify(cl, none)
  :: else -> break
  od
}

/* Pool::Impl::tick, for ever (the real one runs every watchdog_interval).
 * One step: tick() holds spawn_mu, its parts only add wakes and workers,
 * and it is not part of the lost-wakeup argument (safe must hold whatever
 * the watchdog does; live needs it). The real tick reads the queue sizes
 * and then calls wake_one; here the two are one step. */
proctype Watchdog() {
end_tick:
  do
  :: atomic {
       /* stall rule; spawn one overflow worker (start_worker) */
       if
       :: (STALLED(0) || STALLED(1)) && !alive[OV] ->
          retire = 0;
          sleep[OV] = RUNNING;
          awake[D]++;
          awake_all++;
          if :: O_DRAINS_K -> awake[K]++ :: else fi;
          alive[OV] = 1
       :: else
       fi;
#if TICK_WAKES
       /* the tick's wake: one sleeper per lane with queued work */
       TICK_WAKE(D, QD);
       TICK_WAKE(K, QK);
#endif
       /* retire a parked overflow worker (under its park_mu, then notify) */
       if
       :: alive[OV] && waiting[OV] && !signalled[OV] && !retire ->
          retire = 1;
          signalled[OV] = 1
       :: else
       fi
     }
  od
}

init {
  atomic {
    alive[0] = 1;
    alive[1] = 1;
    awake[D] = 2;
    awake[K] = 1;
    awake_all = 2;
    run Worker(0);
    run Worker(1);
    run Worker(OV);
    run External();
    run Watchdog()
  }
}
