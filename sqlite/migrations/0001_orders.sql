-- Orders: the single source of truth of every order's state. Times are unix
-- microseconds, UTC; JSON columns keep the bytes they were given.
CREATE TABLE orders (
    id           INTEGER PRIMARY KEY,
    order_no     TEXT    NOT NULL UNIQUE,
    flow         TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    deadline_at  INTEGER,
    amount       INTEGER NOT NULL,
    currency     TEXT    NOT NULL,
    user_id      TEXT    NOT NULL,
    items        TEXT,
    coupon       TEXT    NOT NULL DEFAULT '',
    metadata     TEXT,
    version      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    closed_at    INTEGER,
    close_reason TEXT    NOT NULL DEFAULT '',
    fired_by     TEXT    NOT NULL DEFAULT '',
    request_hash TEXT    NOT NULL DEFAULT ''
) STRICT;

-- The due index holds only orders that wait for a deadline, so it shrinks as
-- orders close. flow rides along so that the next-deadline query and the
-- claim's flow filter read the index alone.
CREATE INDEX orders_due_idx ON orders (deadline_at, flow) WHERE deadline_at IS NOT NULL;

-- Newest-first listings, unfiltered and by the two filters the console uses.
CREATE INDEX orders_created_idx ON orders (created_at DESC, id DESC);
CREATE INDEX orders_user_idx ON orders (user_id, created_at DESC, id DESC);
CREATE INDEX orders_state_idx ON orders (state, created_at DESC, id DESC);
