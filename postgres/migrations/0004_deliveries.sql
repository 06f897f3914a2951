-- Deliveries: one outbox event handed to one subscriber, created pending in
-- the statement that writes the event. attempts counts every attempt ever
-- started and is the lease token; retry_base is attempts when an operator
-- last retried it. A claim sets next_attempt_at to lease_until, so that a
-- lease whose worker died makes the delivery due again.
--
-- order_id has no foreign key, unlike in the SQLite store: event_id already
-- references the outbox row, which references the order, and the store
-- copies order_id from that very row. A second key would cost the close
-- path, which writes a delivery per subscriber of every closed order, one
-- more lookup and row lock in orders per delivery.
CREATE TABLE deliveries (
	id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	event_id        uuid        NOT NULL REFERENCES outbox (id),
	order_id        bigint      NOT NULL,
	order_no        text        NOT NULL,
	event_type      text        NOT NULL,
	subscriber      text        NOT NULL,
	status          text        NOT NULL,
	attempts        int         NOT NULL DEFAULT 0,
	retry_base      int         NOT NULL DEFAULT 0,
	next_attempt_at timestamptz NOT NULL,
	lease_owner     text        NOT NULL DEFAULT '',
	lease_until     timestamptz,
	unknown         bool        NOT NULL DEFAULT false,
	last_error      text        NOT NULL DEFAULT '',
	created_at      timestamptz NOT NULL,
	updated_at      timestamptz NOT NULL,
	done_at         timestamptz,
	CONSTRAINT deliveries_event_subscriber_key UNIQUE (event_id, subscriber)
);

-- The claim reads pending deliveries in due order; the index holds only
-- pending ones, so it stays as small as the backlog.
CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_order_idx ON deliveries (order_id, id);
-- Dead deliveries wait for an operator and are few; the index lets
-- DeliveryCount count them without reading every delivery ever made.
CREATE INDEX deliveries_dead_idx ON deliveries (updated_at) WHERE status = 'dead';

-- One row per finished attempt. An attempt whose worker died has none.
CREATE TABLE delivery_attempts (
	delivery_id bigint      NOT NULL REFERENCES deliveries (id),
	attempt     int         NOT NULL,
	worker      text        NOT NULL DEFAULT '',
	started_at  timestamptz NOT NULL,
	duration_us bigint      NOT NULL DEFAULT 0,
	outcome     text        NOT NULL DEFAULT '',
	error       text        NOT NULL DEFAULT '',
	PRIMARY KEY (delivery_id, attempt)
);

-- Effects that local handlers applied, one row per consumer and event,
-- written in the transaction of the effect so that it happens once.
CREATE TABLE effects (
	consumer   text        NOT NULL,
	event_id   text        NOT NULL,
	created_at timestamptz NOT NULL,
	PRIMARY KEY (consumer, event_id)
);
