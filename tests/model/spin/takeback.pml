/*
 * takeback.pml: submit_one's take-back when the pool shuts down under it,
 * against a descriptor that was recycled meanwhile (daemon/pool/src/submit.cc,
 * its inv 5; pool_internal.h inv 1 and 2).
 *
 * One descriptor (state, generation, the task it holds), one inject ring of
 * entries {generation}, one worker, two submitters A and B of one
 * non-waitable task each, and shutdown, which clears `accepting` once at any
 * point. Every step is one shared access in the code's order, except where a
 * step is one atomic operation there (a CAS, a ring push or pop), as in
 * wake.pml; the seq_cst fence between a submitter's push and its read of
 * `accepting` (inv 5's handshake) is what makes Spin's interleaving of those
 * two steps sound.
 *
 * Submitter (submit_one): take the descriptor when it is free (the free
 * ring), publish (state QUEUED, its task, read the generation), push the
 * entry, read `accepting`. Still accepting: accepted. Shutting down: CAS
 * QUEUED -> CLAIMED on the descriptor;
 *   lost:  a worker (or the scan) claimed it: accepted after all;
 *   won, same generation: its own task: ended cancelled, freed, refused;
 *   won, another generation (the fix): its task ran and was freed and the
 *          claim took a newer task: give it back (QUEUED, a new entry) and
 *          report its own accepted.
 * Worker (next_task + run_task): pop an entry; a stale generation is
 * dropped (a filter: a separate step from the claim); CAS QUEUED -> CLAIMED;
 * run the task the descriptor holds; free it (generation + 1, FREE). It
 * leaves when both submitters are done and the ring is empty (drain).
 *
 * The claim `safe`: once everything is over, each task ran exactly as often
 * as its caller was told it was accepted (once if accepted, never if
 * refused); and no task ever runs twice (assert). BUGGY_NO_GEN_CHECK is the
 * code before the fix: a won CAS is taken as its own task, so a newer task
 * (B's, accepted) is ended unseen while A is told "refused" for a task that
 * ran; the search must find it.
 */

#define FREE    0
#define QUEUED  1
#define CLAIMED 2

byte state = FREE;
byte gen = 0;
byte task = 0;        /* 1: A's, 2: B's */
bool accepting = true;
chan ring = [4] of { byte };

byte ran[3];
bool told_ok[3];
byte submitters_done = 0;
bool worker_done = false;

inline submit(me) {
  byte g;
  atomic { state == FREE -> state = QUEUED; task = me; g = gen }  /* acquire + publish */
  ring ! g;
  if
  :: accepting -> told_ok[me] = true
  :: else ->
     if
     :: atomic { state == QUEUED -> state = CLAIMED };
#ifdef BUGGY_NO_GEN_CHECK
        told_ok[me] = false;
        atomic { gen++; state = FREE }  /* finish(cancelled): whichever task it holds */
#else
        if
        :: gen == g -> told_ok[me] = false; atomic { gen++; state = FREE }
        :: else ->
           told_ok[me] = true;
           state = QUEUED;  /* the newer task, back for a claim */
           ring ! gen
        fi
#endif
     :: else -> told_ok[me] = true  /* someone else claimed it first */
     fi
  fi;
  submitters_done++
}

active proctype SubmitterA() { submit(1) }
active proctype SubmitterB() { submit(2) }

active proctype Shutdown() { accepting = false }

active proctype Worker() {
  byte e, t;
  do
  :: ring ? e ->
     if
     :: e != gen -> skip  /* stale entry (inv 2) */
     :: else ->
        if
        :: atomic { state == QUEUED -> state = CLAIMED; t = task };
           ran[t]++;
           assert(ran[t] <= 1);
           atomic { gen++; state = FREE }
        :: else -> skip  /* claimed by someone else: dropped */
        fi
     fi
  :: atomic { submitters_done == 2 && empty(ring) -> break }
  od;
  worker_done = true
}

#define OK(t) ((told_ok[t] && ran[t] == 1) || (!told_ok[t] && ran[t] == 0))
ltl safe { [] ((worker_done && submitters_done == 2) -> (OK(1) && OK(2))) }
