-- Deliveries: one outbox event handed to one subscriber, created pending in
-- the transaction that writes the event. attempts counts every attempt ever
-- started and is the lease token; retry_base is attempts when an operator last
-- retried it. A claim sets next_attempt_at to lease_until, so that a lease
-- whose worker died makes the delivery due again.
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY,
    event_id        TEXT    NOT NULL REFERENCES outbox (id),
    order_id        INTEGER NOT NULL REFERENCES orders (id),
    order_no        TEXT    NOT NULL,
    event_type      TEXT    NOT NULL,
    subscriber      TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    retry_base      INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    lease_owner     TEXT    NOT NULL DEFAULT '',
    lease_until     INTEGER,
    unknown         INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    done_at         INTEGER,
    UNIQUE (event_id, subscriber)
) STRICT;

-- The claim reads pending deliveries in due order; the index holds only
-- pending ones, so it stays as small as the backlog.
CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_order_idx ON deliveries (order_id, id);
-- Dead deliveries wait for an operator and are few; the index lets
-- DeliveryCount count them without reading every delivery ever made.
CREATE INDEX deliveries_dead_idx ON deliveries (updated_at) WHERE status = 'dead';

-- One row per finished attempt. An attempt whose worker died has none.
CREATE TABLE delivery_attempts (
    delivery_id INTEGER NOT NULL REFERENCES deliveries (id),
    attempt     INTEGER NOT NULL,
    worker      TEXT    NOT NULL DEFAULT '',
    started_at  INTEGER NOT NULL,
    duration_us INTEGER NOT NULL DEFAULT 0,
    outcome     TEXT    NOT NULL DEFAULT '',
    error       TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, attempt)
) STRICT, WITHOUT ROWID;

-- Effects that local handlers applied, one row per consumer and event, written
-- in the transaction of the effect so that it happens once.
CREATE TABLE effects (
    consumer   TEXT    NOT NULL,
    event_id   TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, event_id)
) STRICT, WITHOUT ROWID;
