// The pool task of a job (engine.cc, JobTask), named for admission.cc, which
// hands jobs to the pool. Private to tpool::engine.
#pragma once

namespace tpool::engine::job_task {

// Task::fn: runs the job (or ends it, when it was cancelled before it
// started). ctx is the Job; the task's reference holds it until the task
// ends (inv 4: Job::hold_for_task, Job::task_reference).
void run(void* ctx);
// SubmitOptions::on_cancel: the pool cancelled the job before it started
// (its token, or shutdown). (E5)
void cancelled(void* ctx);

}  // namespace tpool::engine::job_task
