-- The outbox: events written in the transaction of the change that caused
-- them. seq orders them for the relay; id is the event id consumers
-- deduplicate on.
CREATE TABLE outbox (
	seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id         uuid        NOT NULL,
	order_id   bigint      NOT NULL REFERENCES orders (id),
	order_no   text        NOT NULL,
	type       text        NOT NULL,
	-- json, not jsonb: consumers receive the bytes that were written.
	payload    json        NOT NULL,
	created_at timestamptz NOT NULL,
	CONSTRAINT outbox_id_key UNIQUE (id)
);

CREATE INDEX outbox_order_idx ON outbox (order_id, seq);
