"""Reasons: the CamelCase words cronoq writes in attempt records, conditions and Events.
Kept in one place so users (and alerts) can rely on them. The words a report may give (the SDK's
and the push runner's) are the pod protocol's, named here from there: one spelling on both sides."""
from cronoq.pod_protocol.report import Reason as _Reported

# Why an attempt ended.
COMPLETED = "Completed"
EXIT_CODE = "ExitCode"
PERMANENT_EXIT_CODE = "PermanentExitCode"
RETRYABLE = "Retryable"          # the SDK raised Retryable
PERMANENT = "Permanent"          # the SDK raised Permanent
OOM_KILLED = "OOMKilled"
EVICTED = "Evicted"
NODE_LOST = "NodeLost"
PREEMPTED = "Preempted"          # by the scheduler, or (a Kueue pool) by Kueue's preemption
EVICTED_BY_KUEUE = "EvictedByKueue"  # Kueue evicted the admitted Job for another cause (its Workload's reason in the message)
POD_FAILED = "PodFailed"
POD_DELETED = "PodDeleted"
JOB_DELETED = "JobDeleted"
JOB_REJECTED = "JobRejected"     # the API server refused the attempt's Job (bad pod template)
JOB_REFUSED = "JobRefused"       # the API server refused the Job for now (a ResourceQuota): retried with backoff
TIMEOUT = _Reported.TIMEOUT       # the attempt ran past its timeout, or a push request got no answer in time
START_TIMEOUT = "StartTimeout"   # stuck Pending (unschedulable, image pull) longer than allowed
INVALID_IMAGE_NAME = "InvalidImageName"  # the kubelet cannot parse the image reference: never heals
POD_CANNOT_START = "PodCannotStart"      # Running condition while the pod waits (its reason in the message)
LEASE_EXPIRED = "LeaseExpired"
LEASE_LOST = _Reported.LEASE_LOST         # the SDK could not renew its lease and stopped itself
HTTP_STATUS = _Reported.HTTP_STATUS       # a push task's endpoint answered with a status that is not success
NETWORK_ERROR = _Reported.NETWORK_ERROR   # a push task's request got no answer (DNS, refused, reset, TLS)
ADDRESS_NOT_ALLOWED = _Reported.ADDRESS_NOT_ALLOWED  # a push task's request would reach a link-local or metadata address
CANCELLED = "Cancelled"
INVALID_REPORT = "InvalidReport"  # a pull worker's report is not the SDK's document

# Why a task is where it is (conditions and the task's message).
WAITING_FOR_SLOT = "WaitingForSlot"
WAITING_FOR_WORKER = "WaitingForWorker"  # a Workers pool with no live worker with room
WAITING_FOR_KEY = "WaitingForKey"  # a concurrency key it names is held by its limit's worth of attempts, across pools
DEBOUNCING = "Debouncing"  # a concurrency key with onNewer Debounce has not been quiet long enough (or a newer task supersedes it)
RATE_LIMITED = "RateLimited"     # a free slot, but the pool's rateLimit has no token yet
POOL_NOT_FOUND = "PoolNotFound"
ATTEMPT_RUNNING = "AttemptRunning"
WAITING_FOR_KUEUE = "WaitingForKueue"  # the attempt's Job is suspended until Kueue admits it (its words in the message)
BACKING_OFF = "BackingOff"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
ATTEMPTS_EXHAUSTED = "AttemptsExhausted"
START_DEADLINE_EXCEEDED = "StartDeadlineExceeded"    # not started within its startDeadline: ended without running
DEADLINE_EXCEEDED = "DeadlineExceeded"               # its deadline passed: the running attempt aborted, too
RETRY_DURATION_EXHAUSTED = "RetryDurationExhausted"  # its retry policy's maxRetryDuration left no room for a retry
IGNORED_ATTEMPTS_EXHAUSTED = "IgnoredAttemptsExhausted"  # an Ignore rule matched once more than maxIgnoredAttempts
INVALID_SPEC = "InvalidSpec"

# Events.
ATTEMPT_ENDED = "AttemptEnded"
STALE_COMPLETION = "StaleCompletion"
FOREIGN_JOB = "ForeignJob"       # a Job for an attempt the status does not name: not adopted
ARCHIVE_PENDING = "ArchivePending"  # its retention ended, but the archive cannot take its rows yet: deletion waits
DELETED_UNARCHIVED = "DeletedUnarchived"  # the archive stayed down for --archive-wait: deleted without its rows

# Why a task has not started, or ended without running.
WAITING_FOR_DEPENDENCIES = "WaitingForDependencies"
DEPENDENCY_UNMET = "DependencyUnmet"
DEPENDENCY_CYCLE = "DependencyCycle"
WAITING_FOR_ORIGINAL = "WaitingForOriginal"
WAITING_FOR_START_TIME = "WaitingForStartTime"  # spec.notBefore or spec.startDelay: not yet (engine/delay.py)
DUPLICATE = "Duplicate"
SUPERSEDED = "Superseded"  # ended Cancelled by a newer task naming a concurrency key whose onNewer policy says so

# A TaskPool's Ready condition.
ADMITTING = "Admitting"
PAUSED = "Paused"                # spec.paused: no new attempts start; running ones go on
KUEUE_NOT_READY = "KueueNotReady"  # admission.kueue, and Kueue is not installed or the LocalQueue is missing or inactive
LEASE_GUARD_MISSING = "LeaseGuardMissing"  # a Workers pool, and nothing checks who may serve it: handed nothing
