--
-- notify_setting: the setting fence.notify_superseded.
--  (a) Off by default.  (The notifications themselves, with the setting on
--      and off: specs/notify-superseded.spec.)
--  (b) Any role may set it for its session, and per role and per database
--      with ALTER ROLE / ALTER DATABASE ... SET: it only decides whether a
--      takeover made by the session also tells the superseded holder, and
--      anyone may NOTIFY any channel anyway, so it guards nothing.
--  (c) It is a boolean: anything else is 22023.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
SHOW fence.notify_superseded;
CREATE ROLE fence_regress_notify_w;
SET ROLE fence_regress_notify_w;
SET fence.notify_superseded = on;
SHOW fence.notify_superseded;
RESET fence.notify_superseded;
SET fence.notify_superseded = 'sometimes';
RESET ROLE;
ALTER ROLE fence_regress_notify_w SET fence.notify_superseded = on;
SELECT unnest(setconfig) FROM pg_db_role_setting
 WHERE setrole = 'fence_regress_notify_w'::regrole;
ALTER ROLE fence_regress_notify_w RESET fence.notify_superseded;
DROP ROLE fence_regress_notify_w;
DROP EXTENSION fence;
