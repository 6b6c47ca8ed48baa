-- Leadership is a lease with a time limit (coordinator_lease), renewed by
-- the leader, instead of a session advisory lock: a lock stays with a
-- frozen leader's open session for as long as the process is stopped, and
-- session locks do not work through a pooler in transaction mode. The
-- lease is a row of its own so that renewing it never waits for the
-- leader's writes, which hold coordinator_leader's row FOR SHARE (see
-- dts_fence in functions.sql): only a change of leader (a new epoch)
-- conflicts with them.
CREATE TABLE coordinator_lease (
    id         integer PRIMARY KEY CHECK (id = 1),
    holder     text,
    epoch      bigint      NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO coordinator_lease (id) VALUES (1);
