/*
 * event_count.pml: the pool's parking protocol, the event count of
 * daemon/pool/include/tpool/pool/event_count.h, as the pool uses it
 * (docs/wake-protocol.md, "Event counts"):
 *   S  a submit blocked for a free descriptor (submit.cc submit_many) on
 *      free_ec; it submits NS tasks one at a time
 *   X  wait() on a waitable task T1 (wait.cc) on done_ec; it then frees T1's
 *      descriptor (recycle -> release_desc)
 *   D  shutdown(kDrain) (shutdown.cc): stops accepting, notifies free_ec, then
 *      sleeps on idle_ec until finished == accepted
 *   W  the one worker: runs T0 (not waitable), T1 (waitable) and S's tasks;
 *      finish() frees a non-waitable task's descriptor (release_desc notifies
 *      free_ec) or publishes T1's terminal state (notifies done_ec); before it
 *      parks it notifies idle_ec (worker.cc inv 5)
 * Two descriptors, both held at the start (by T0 and T1), so S blocks.
 *
 * Each waiter runs the protocol of the header:
 *   while (!C) { key = prepare_wait(); if (C) { cancel_wait(); break; }
 *                commit_wait(key); }
 * prepare_wait  waiters++, notified := 0, key := epoch        (one RMW)
 * cancel_wait   waiters--
 * commit_wait   under mu: if epoch == key, sleep (inv 5); woken: waiters--
 * Each notifier makes its waiter's condition true, then (fence) notify_all:
 * decide  if waiters > 0 && !notified: epoch++, notified := 1   (one CAS,
 *         at the load that follows the fence)
 * signal  lock mu, unlock, cv.notify_all: wakes the waiter asleep on it
 *
 * Spin explores sequentially consistent interleavings. The seq_cst fences of
 * the implementation (after prepare_wait's RMW; between a notifier's store and
 * its load of the word) are what make the two racing sides behave so
 * (event_count.h inv 3); they need no statement here. A missing fence is
 * modelled as the reordering it allows (BUGGY_NOTIFY_NO_FENCE).
 *
 * Known-bad variants (each must be rejected):
 *   -DBUGGY_CHECK_BEFORE_PREPARE  the waiter checks its condition, then
 *        registers and sleeps without a re-check: the missed wake-up that the
 *        pool's 1 ms rounds used to hide
 *   -DBUGGY_NOTIFY_NO_FENCE       every notifier loads the waiter word before
 *        its state change is visible (no fence between them, inv 3)
 *   -DBUGGY_PREPARE_KEEPS_NOTIFIED  prepare_wait does not clear `notified`
 *        (inv 4): a waiter that waits a second time is skipped as notified
 *   -DBUGGY_NOTIFY_UNLOCKED       commit_wait checks the epoch and goes to
 *        sleep in two steps, without the mutex the notifier takes (inv 5)
 *
 * Properties:
 *   safe  at every state, no waiter sleeps while its condition holds unless
 *         a notifier of it is between its state change and the end of its
 *         notify (ghost owe[], idle_owed). Check: ./pan -N safe
 *   live  under weak fairness, S, X and D all return. Check: ./pan -a -f -N live
 *
 * Tunables: NS (S's submits, default 2: two waits on free_ec, which
 * BUGGY_PREPARE_KEEPS_NOTIFIED needs).
 *
 * Not modelled: the workers' own sleep/wake handshake (wake.pml: here W runs
 * whenever it has work, as the wake protocol guarantees), help_wait (its
 * notifiers are notify() on every push and the group's last done(), each a
 * state change, fence, notify_all like the ones here), timed waits (a
 * deadline only ends a wait early), the DescCaches (descriptors.cc inv 4).
 */

#ifndef NS
#define NS 2
#endif

#define FREE 0 /* free_ec, waited on by S */
#define DONE 1 /* done_ec, waited on by X */
#define IDLE 2 /* idle_ec, waited on by D */

/* ---- the event counts (index: FREE, DONE, IDLE) ------------------------ */
byte ec_waiters[3];
bit ec_notified[3];
byte ec_epoch[3];
bit asleep[3]; /* the one waiter of each event count is inside cv.wait */

/* ---- pool state ---------------------------------------------------------- */
byte free = 0;      /* descriptors in the free ring */
byte queued = 1;    /* non-waitable tasks queued: T0, then S's */
bit t1_queued = 1;  /* the waitable task T1 */
bit t1_done = 0;    /* T1's terminal state */
byte accepted = 2;  /* T0 and T1 */
byte finished = 0;
bit accepting = 1;

/* ---- ghost state (not in the implementation) ---------------------------- */
byte owe[3];       /* notifiers between their state change and their signal */
bit idle_owed = 0; /* W finished a task and has not yet passed its park notify */
bit s_done = 0;
bit x_done = 0;
bit d_done = 0;

#define C_FREE (free > 0 || !accepting)
#define C_DONE (t1_done)
#define C_IDLE (finished == accepted)
#define STUCK_S (asleep[FREE] && C_FREE && owe[FREE] == 0)
#define STUCK_X (asleep[DONE] && C_DONE && owe[DONE] == 0)
#define STUCK_D (asleep[IDLE] && C_IDLE && owe[IDLE] == 0 && !idle_owed)

ltl safe { [] !(STUCK_S || STUCK_X || STUCK_D) }
ltl live { <> (s_done && x_done && d_done) }

/* ---- the event count (uses the caller's locals key and sig) -------------- */
inline prepare(e) {
  atomic {
    ec_waiters[e]++;
#ifndef BUGGY_PREPARE_KEEPS_NOTIFIED
    ec_notified[e] = 0;
#endif
    key = ec_epoch[e]
  }
}

inline cancel(e) { ec_waiters[e]-- }

inline commit(e) {
#ifdef BUGGY_NOTIFY_UNLOCKED
  if
  :: ec_epoch[e] == key -> sig = 1
  :: else -> sig = 0
  fi;
  if
  :: sig -> asleep[e] = 1; sig = 0
  :: else
  fi;
#else
  /* under mu_: the check of the epoch and the sleep are one step to a
   * notifier, which takes mu_ after its epoch bump (inv 5) */
  atomic {
    if
    :: ec_epoch[e] == key -> asleep[e] = 1
    :: else
    fi
  };
#endif
  /* cv.wait: no end label, so a waiter left here is a stuck waiter */
  !asleep[e];
  ec_waiters[e]--
}

/* Wait for COND on event count e with the protocol of the header. */
inline await(e, COND) {
  do
  :: COND -> break
  :: else ->
#ifdef BUGGY_CHECK_BEFORE_PREPARE
     /* the check above was the only one: register, then sleep */
     prepare(e);
     commit(e)
#else
     prepare(e);
     if
     :: COND -> cancel(e); break
     :: else -> commit(e)
     fi
#endif
  od
}

/* notify_all after the caller's fence: the load of the word and the CAS. */
inline decide(e) {
  atomic {
    if
    :: ec_waiters[e] > 0 && !ec_notified[e] ->
       ec_epoch[e] = ec_epoch[e] + 1;
       ec_notified[e] = 1;
       sig = 1
    :: else -> sig = 0
    fi
  }
}

/* lock mu_; unlock; cv.notify_all(): wakes the waiter asleep on e. */
inline signal(e) {
  atomic {
    if
    :: sig -> asleep[e] = 0
    :: else
    fi;
    sig = 0;
    owe[e]--
  }
}

/* A descriptor goes back to the free ring (release_desc), then notify. */
inline release() {
#ifdef BUGGY_NOTIFY_NO_FENCE
  atomic { owe[FREE]++; decide(FREE) };
  free++;
#else
  atomic { free++; owe[FREE]++ };
  decide(FREE);
#endif
  signal(FREE)
}

proctype Worker() {
  byte key;
  bit sig;
end_idle:
  do
  :: atomic { queued > 0 -> queued-- };
     /* run it; finish(): count it, then recycle -> release_desc */
     atomic { finished++; idle_owed = 1 };
     release()
  :: atomic { t1_queued -> t1_queued = 0 };
     /* finish() of a waitable task: terminal state, fence, notify done_ec */
#ifdef BUGGY_NOTIFY_NO_FENCE
     atomic { owe[DONE]++; decide(DONE) };
     atomic { t1_done = 1; finished++; idle_owed = 1 };
#else
     atomic { t1_done = 1; finished++; idle_owed = 1; owe[DONE]++ };
     decide(DONE);
#endif
     signal(DONE)
  :: atomic { queued == 0 && !t1_queued && idle_owed -> skip };
     /* nothing to run: the sleep transition (c1, c2 fence, re-check), then
      * on_park notifies idle_ec, then the worker parks (not modelled: it
      * runs again as soon as it has work) */
     decide(IDLE);
     atomic { if :: sig -> asleep[IDLE] = 0 :: else fi; sig = 0; idle_owed = 0 }
  od
}

/* submit_many with Backpressure::kBlock, NS times one task. */
proctype Submitter() {
  byte key;
  bit sig;
  byte left = NS;
  do
  :: left == 0 -> break
  :: left > 0 ->
     accepted++;
     /* fence (pool inv 5), then accepting */
     if
     :: !accepting -> goto unaccept
     :: else
     fi;
acquire:
     if
     :: atomic { free > 0 -> free--; queued++; left-- } /* take, publish */
     :: else ->
        await(FREE, C_FREE);
        if
        :: !accepting -> goto unaccept
        :: else -> goto acquire
        fi
     fi
  od;
  goto out;
unaccept:
  /* give back what we counted, then (fence) notify idle_ec */
#ifdef BUGGY_NOTIFY_NO_FENCE
  atomic { owe[IDLE]++; decide(IDLE) };
  accepted--;
#else
  atomic { accepted--; owe[IDLE]++ };
  decide(IDLE);
#endif
  signal(IDLE);
out:
  s_done = 1
}

/* wait() on T1, then T1's descriptor is freed (recycle -> release_desc). */
proctype Waiter() {
  byte key;
  bit sig;
  await(DONE, C_DONE);
  release();
  x_done = 1
}

/* shutdown(kDrain). */
proctype Shutdown() {
  byte key;
  bit sig;
#ifdef BUGGY_NOTIFY_NO_FENCE
  atomic { owe[FREE]++; decide(FREE) };
  accepting = 0;
#else
  atomic { accepting = 0; owe[FREE]++ };
  decide(FREE);
#endif
  signal(FREE);
  await(IDLE, C_IDLE);
  d_done = 1
}

init {
  atomic {
    run Worker();
    run Submitter();
    run Waiter();
    run Shutdown()
  }
}
