--
-- rules: a rule is part of what "protected" means (intact.c).  A protected
-- relation has no rule: a DO INSTEAD rule turns a write into one the guard
-- never sees, and the writer is told it succeeded.  CREATE RULE on a
-- protected table was already refused; a table that carries a rule can no
-- longer join a protected tree (ALTER TABLE ... INHERIT), be protected
-- (fence_protect), or keep a declared rule unnoticed: the end of every
-- command refuses it (5F006) and fence_audit reports it.  The twin: a
-- declared INHERIT lets the table in, and a tokenless INSERT into it
-- "succeeds" while the parent refuses the same INSERT with 5F003.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TABLE lp (id int, v text, writer_epoch bigint);
SELECT fence_protect('lp');
CREATE TABLE sink (id int, v text, writer_epoch bigint);
CREATE TABLE r (id int, v text, writer_epoch bigint);
CREATE RULE r_swallow AS ON INSERT TO r DO INSTEAD
	INSERT INTO sink VALUES (NEW.id, NEW.v, NEW.writer_epoch);

-- joining a protected tree: refused, rolled back
\set VERBOSITY terse
ALTER TABLE r INHERIT lp;
\set VERBOSITY sqlstate
SELECT count(*) AS r_inherits FROM pg_inherits WHERE inhrelid = 'r'::regclass;
SELECT count(*) AS r_registered FROM fence_protected WHERE relation = 'r'::regclass;
-- protecting it: refused
SELECT fence_protect('r');
\echo :SQLSTATE
-- ATTACH PARTITION of a table with a rule: refused the same way
CREATE TABLE pp (id int, v text, writer_epoch bigint) PARTITION BY LIST (id);
SELECT fence_protect('pp');
CREATE TABLE pr (id int, v text, writer_epoch bigint);
CREATE RULE pr_swallow AS ON UPDATE TO pr DO INSTEAD NOTHING;
ALTER TABLE pp ATTACH PARTITION pr FOR VALUES IN (1);
\echo :SQLSTATE
SELECT count(*) AS pr_attached FROM pg_inherits WHERE inhrelid = 'pr'::regclass;

-- twin: declared, the table joins, and a tokenless INSERT into it is
-- swallowed by the rule, while the parent refuses it
BEGIN;
SELECT fence_allow_ddl('lp', 'let r in');
ALTER TABLE r INHERIT lp;
COMMIT;
SELECT count(*) AS r_registered FROM fence_protected WHERE relation = 'r'::regclass;
INSERT INTO r VALUES (1, 'no token', 0);
INSERT INTO lp VALUES (1, 'no token', 0);
\echo :SQLSTATE
SELECT count(*) AS swallowed FROM sink;
-- fence_audit reports the rule on the member, and the next DDL touching the
-- tree is refused until it is dropped
SELECT severity, relation, problem, fix FROM fence_audit() WHERE relation = 'r'::regclass;
ALTER TABLE lp ADD COLUMN note text;
\echo :SQLSTATE
DROP RULE r_swallow ON r;
ALTER TABLE lp ADD COLUMN note text;
SELECT count(*) AS r_findings FROM fence_audit() WHERE relation = 'r'::regclass;
INSERT INTO r VALUES (2, 'no token', 0);
\echo :SQLSTATE

-- a declared CREATE RULE on a protected table is reported too
BEGIN;
SELECT fence_allow_ddl('lp', 'a rule for a while');
CREATE RULE lp_nothing AS ON DELETE TO lp DO INSTEAD NOTHING;
COMMIT;
SELECT severity, relation, problem FROM fence_audit() WHERE relation = 'lp'::regclass;
DROP RULE lp_nothing ON lp;

DROP TABLE lp, r, sink, pp, pr;
DROP EXTENSION fence;
