// index.d.ts: the TypeScript types of fence's Node client (index.js).
import type { Pool, PoolClient, DatabaseError } from 'pg';

/** The channel fence NOTIFYs on when fence.notify_superseded is on. */
export const SUPERSEDED_CHANNEL: 'fence_superseded';

export interface ClaimOptions {
  /** The lease in milliseconds (a finite number; fence refuses 0 with 22023). */
  lease: number;
  /** fence's schema; looked up in pg_extension when not given. */
  schema?: string;
  /** The claim's holder; defaults to "fence-node HOST:PID". */
  holder?: string;
}

/** Base class of the errors the package makes itself. */
export class FenceError extends Error {}

/** fence_claim returned NULL: the job is held. Try again later. */
export class HeldError extends FenceError {
  readonly job: string;
  constructor(job: string);
}

/** fence refused this execution (SQLSTATE class 5F): stop, do not retry. */
export class FencedError extends FenceError {
  readonly job: string;
  readonly token: string;
  /** The SQLSTATE, 5F... */
  readonly code: string;
  /** The pg error. */
  readonly cause: DatabaseError;
  constructor(job: string, token: string, error: DatabaseError);
}

export class Job {
  readonly pool: Pool;
  readonly name: string;
  /** The fencing token, a bigint as node-postgres returns it: a string. */
  readonly token: string;
  /** The lease in milliseconds. */
  readonly lease: number;
  readonly schema: string;
  /** Aborted on takeover (reason: a FencedError, or a FenceError for a notification). */
  readonly signal: AbortSignal;
  /** null until the claim's end, then what fence_release answered. */
  readonly released: boolean | null;
  /** An error of the release, kept when the callback had thrown. */
  readonly releaseError: unknown;
  /** The last renewal's expiry. */
  readonly renewedUntil: Date | null;
  /** The last renewal's error, if any. */
  readonly renewError: unknown;
  /** BEGIN, fence_begin(job, token), fn(client), COMMIT (ROLLBACK on error). */
  transaction<T>(fn: (client: PoolClient) => Promise<T> | T): Promise<T>;
  /** fence_once(key) in client's current transaction (inside transaction()). */
  once(key: string, client: PoolClient): Promise<boolean>;
}

/** Claim job, run fn while the lease is renewed, release. Rejects with HeldError when held. */
export function claim<T>(pool: Pool, job: string, options: ClaimOptions,
  fn: (job: Job) => Promise<T> | T): Promise<T>;
