-- bench/sql/fence_protect.sql: run after setup.sql when fence is installed.
-- The bulk/single tables run in repeat mode: the same execution (token)
-- writes the same rows again and again, which strict mode forbids by
-- design.  strict and repeat differ only in > versus >= on the stored
-- epoch, so the hot path measured is the same.  The mixed-shape tables run
-- in strict mode: every handler transaction claims a fresh token.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
SELECT fence_protect('b_fence_stmt', 'writer_epoch', 'repeat');
SELECT fence_protect('b_fence_begin', 'writer_epoch', 'repeat');
SELECT fence_protect(t || '_' || v, 'writer_epoch', 'strict')
  FROM unnest(ARRAY['fence_stmt', 'fence_begin']) v,
	   unnest(ARRAY['m1', 'm2', 'm3']) t;
SELECT fence_protect('mem_fence', 'writer_epoch', 'repeat');

-- The claims benchmark's jobs, claimed once so that every measured claim
-- takes the same path as the raw variant's (a takeover of an expired lease).
SELECT count(fence_claim('cj_' || g, interval '1 millisecond', 'bench'))
  FROM generate_series(1, :njobs) g;
ANALYZE fence_claims;
