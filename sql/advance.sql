--
-- advance: the counter after what PostgreSQL cannot see.
--  * A row whose stored epoch is above every token issued (a restore, a
--    pg_dump -t load, a test that set the epoch by hand) is reported as an
--    epoch "from the future" (5F002), naming fence_advance.
--  * fence_advance(margin), superusers only, moves the counter past the
--    largest claim token and every stored epoch of every protected table,
--    plus the margin; never backwards; recorded as 'counter_move'.
--  * A new counter's first claim moves nothing (it was made here, unused:
--    t/012_history.pl tests the histories that move it); no timeline range
--    ends at 2^40; fence_advance refuses to pass the counter's own end
--    (54000); a counter set ahead of the clock's floor issues at once, with
--    a warning.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE TABLE inv (id int PRIMARY KEY, q int, writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO inv VALUES (1, 10, 0), (2, 20, 0);
SELECT fence_protect('inv');
CREATE TABLE inv_plain (LIKE inv INCLUDING ALL);
INSERT INTO inv_plain SELECT * FROM inv;

-- a row written with token t, then the counter set back below it, as a
-- restore of an older counter would
SELECT count(fence_claim('adv-pre-' || g, '1 hour')) FROM generate_series(1, 5) g;
SELECT fence_claim('adv-1', '1 hour') AS t1 \gset
UPDATE inv SET q = 11, writer_epoch = :t1 WHERE id = 1;
-- (the claims of the earlier tokens are deleted, as a restore of an older
-- registry would lose them; else the rewound counter collides with them)
DELETE FROM fence_claims WHERE job LIKE 'adv-pre-%';
SELECT setval('fence_token_seq', 1);
SELECT fence_claim('adv-2', '1 hour') AS t2 \gset
SELECT :t2 < :t1 AS new_token_below_stored_epoch;
\set VERBOSITY default
UPDATE inv SET q = 12, writer_epoch = :t2 WHERE id = 1;
\set VERBOSITY sqlstate
-- twin: without the guard the older token's write lands over the newer row
UPDATE inv_plain SET q = 11, writer_epoch = :t1 WHERE id = 1;
UPDATE inv_plain SET q = 12, writer_epoch = :t2 WHERE id = 1;
SELECT q, writer_epoch = :t2 AS epoch_moved_backwards FROM inv_plain WHERE id = 1;

-- fence_advance: superusers only, margin >= 0
CREATE ROLE fence_regress_adv;
SET ROLE fence_regress_adv;
SELECT fence_advance();
RESET ROLE;
SELECT fence_advance(-1);
SELECT fence_advance(NULL);
DROP ROLE fence_regress_adv;

-- past every stored epoch and claim, plus the margin
SELECT fence_advance(1000) = :t1 + 1000 AS past_the_highest_epoch;
SELECT fence_claim('adv-3', '1 hour') AS t3 \gset
SELECT :t3 = :t1 + 1001 AS next_token_follows;
UPDATE inv SET q = 13, writer_epoch = :t3 WHERE id = 1;
SELECT q, writer_epoch = :t3 AS stamped FROM inv WHERE id = 1;
-- never backwards
SELECT fence_advance(0) = :t3 AS stays_put;
SELECT last_value = :t3 AS counter_unchanged FROM fence_token_seq;
-- recorded
SELECT action, reason, detail LIKE 'from % to %' AS detail_ok
  FROM fence_audit_log WHERE action = 'counter_move' ORDER BY at;

-- the move is flushed up to the end of its own record, even when that
-- record ends exactly on a WAL page boundary (where the position after the
-- next page's header, not yet written, cannot be flushed).  A logical
-- message pads the WAL so that the counter's record is the page's last;
-- its size is a setval() record's, measured on another sequence, and an
-- attempt counts only if the padding left exactly that much room.
CREATE SEQUENCE adv_probe;
SELECT setval('adv_probe', 1);
CREATE TEMP TABLE adv_boundary (aimed int);
DO $$
DECLARE
	page constant int := current_setting('wal_block_size')::int;
	rec int := 2147483647;		-- a setval() record's size
	fill int;					-- a logical message's size, less its payload
	at pg_lsn;
	room int;					-- what is left of the page at the insert position
	aimed int := 0;
BEGIN
	FOR i IN 1..3 LOOP
		at := pg_current_wal_insert_lsn();
		PERFORM setval('adv_probe', i);
		rec := least(rec, (pg_current_wal_insert_lsn() - at)::int);
	END LOOP;
	at := pg_current_wal_insert_lsn();
	PERFORM pg_logical_emit_message(false, 'p', repeat('x', 512));
	fill := (pg_current_wal_insert_lsn() - at)::int - 512;
	FOR i IN 1..40 LOOP
		at := pg_current_wal_insert_lsn();
		room := page - ((at - '0/0'::pg_lsn) % page)::int;
		IF room - rec - fill < 512 THEN
			-- too little room left on this page: fill it, try the next
			PERFORM pg_logical_emit_message(false, 'p', repeat('x', room + 512));
			CONTINUE;
		END IF;
		PERFORM pg_logical_emit_message(false, 'p', repeat('x', room - rec - fill));
		room := page - ((pg_current_wal_insert_lsn() - '0/0'::pg_lsn) % page)::int;
		IF room = rec THEN
			aimed := aimed + 1;
		ELSE
			-- the size is off by MAXALIGN padding: learn it
			fill := fill + rec - room;
		END IF;
		PERFORM fence_advance(1);
	END LOOP;
	INSERT INTO adv_boundary VALUES (aimed);
END
$$;
SELECT aimed >= 10 AS counter_record_ended_on_page_boundaries FROM adv_boundary;
DROP SEQUENCE adv_probe;

-- No range ends at 2^40 any more: the counter's order across failovers
-- comes from its histories, not from the timeline's number, and nothing
-- refuses to issue at a timeline's boundary
SELECT setval('fence_token_seq', (1::bigint << 40) - 2);
SELECT fence_claim('adv-last', '1 hour') = (1::bigint << 40) - 1 AS below_2_40;
SELECT fence_claim('adv-beyond', '1 hour') = (1::bigint << 40) AS at_2_40;
SELECT fence_advance(1) = (1::bigint << 40) + 1 AS margin_counts;

-- the counter's own end: fence_advance refuses to pass it (54000)
SELECT setval('fence_token_seq', 9223372036854775000);
SELECT fence_advance(1000);
-- a counter ahead of the clock's floor (only a setval() or fence_advance()
-- by hand puts it there) is issued at once, with a warning, not waited for
\set VERBOSITY terse
SELECT fence_claim('adv-ahead', '1 hour') = 9223372036854775001 AS issued_ahead_of_clock;
SELECT fence_claim('adv-ahead-2', '1 hour') = 9223372036854775002 AS warned_once;
\set VERBOSITY sqlstate

DROP TABLE inv, inv_plain;
DROP EXTENSION fence;
