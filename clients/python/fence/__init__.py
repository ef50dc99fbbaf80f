"""fence: a worker's side of fence's protocol, over psycopg 3.

    import fence

    with fence.claim(conn, "restock:order-1001", 30) as job:
        ...                                    # read, compute; job.superseded
        with job.transaction():                # BEGIN; fence_begin(job, token)
            if job.once("restock:order-1001:effect"):
                conn.execute("UPDATE inventory SET ...")
                                               # COMMIT
                                               # fence_release on the way out

claim() claims the job (fence.Held when it is held), renews the lease at a
third of it on a connection of its own while the block runs, and releases
on exit.  An error of SQLSTATE class 5F raises fence.Fenced and sets
job.superseded; every other error is psycopg's own.  See README.md.
"""

from ._client import SUPERSEDED_CHANNEL, Error, Fenced, Held, Job, claim

__all__ = ["Error", "Fenced", "Held", "Job", "claim", "SUPERSEDED_CHANNEL"]
__version__ = "0.1.0"
