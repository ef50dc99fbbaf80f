-- bench/sql/fence_protect.sql: run after setup.sql when fence is installed.
-- The bulk/single tables run in repeat mode: the same execution (token)
-- writes the same rows again and again, which strict mode forbids by
-- design.  strict and repeat differ only in > versus >= on the stored
-- epoch, so the hot path measured is the same.  The mixed-shape tables run
-- in strict mode: every handler transaction claims a fresh token.
-- The fence_after_* tables are protected in the after form:
-- UPDATEs are checked in the WHEN clause of an AFTER UPDATE trigger, which
-- does not stamp, so their UPDATEs write the token in SET themselves (and
-- a rewrite with the token the row holds needs fence_begin, which is why
-- there is no b_fence_after_stmt: see bench/run).
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
SELECT fence_protect('b_fence_stmt', 'writer_epoch', 'repeat');
SELECT fence_protect('b_fence_begin', 'writer_epoch', 'repeat');
SELECT fence_protect('b_fence_after_begin', 'writer_epoch', 'repeat', form => 'after');
SELECT fence_protect(t || '_' || v, 'writer_epoch', 'strict')
  FROM unnest(ARRAY['fence_stmt', 'fence_begin']) v,
	   unnest(ARRAY['m1', 'm2', 'm3']) t;
SELECT fence_protect(t || '_' || v, 'writer_epoch', 'strict', form => 'after')
  FROM unnest(ARRAY['fence_after_stmt', 'fence_after_begin']) v,
	   unnest(ARRAY['m1', 'm2', 'm3']) t;
SELECT fence_protect('mem_fence', 'writer_epoch', 'repeat');
SELECT fence_protect('mem_fence_after', 'writer_epoch', 'repeat', form => 'after');
-- WAL per UPDATE: a fresh token every round (see bench/run).
SELECT fence_protect('w_fence_stmt', 'writer_epoch', 'repeat');
SELECT fence_protect('w_fence_begin', 'writer_epoch', 'repeat');
SELECT fence_protect('w_fence_after_stmt', 'writer_epoch', 'repeat', form => 'after');
SELECT fence_protect('w_fence_after_begin', 'writer_epoch', 'repeat', form => 'after');

-- The claims benchmark's jobs, claimed once so that every measured claim
-- takes the same path as the raw variant's (a takeover of an expired lease).
SELECT count(fence_claim('cj_' || g, interval '1 millisecond', 'bench'))
  FROM generate_series(1, :njobs) g;
ANALYZE fence_claims;
