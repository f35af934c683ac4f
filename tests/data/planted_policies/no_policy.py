"""No scheduler here: a helper module with no SchedulerPolicy subclass."""


def helper() -> int:
    return 1
