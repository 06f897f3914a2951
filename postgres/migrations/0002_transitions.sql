-- The transition log: one row per state change, written in the change's
-- transaction.
CREATE TABLE transitions (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	order_id   bigint      NOT NULL REFERENCES orders (id),
	from_state text        NOT NULL DEFAULT '',
	to_state   text        NOT NULL,
	event      text        NOT NULL,
	version    bigint      NOT NULL,
	fired_by   text        NOT NULL DEFAULT '',
	actor      text        NOT NULL DEFAULT '',
	reason     text        NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL
);

CREATE INDEX transitions_order_idx ON transitions (order_id, id);
