-- Reviews: orders waiting for an operator because automation gave up on
-- them. delivery_id names the delivery that died, NULL when none did.
CREATE TABLE reviews (
	id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	order_id    bigint      NOT NULL REFERENCES orders (id),
	order_no    text        NOT NULL,
	reason      text        NOT NULL,
	delivery_id bigint,
	created_at  timestamptz NOT NULL,
	resolved_at timestamptz
);

CREATE INDEX reviews_order_idx ON reviews (order_id);
-- The open queue, newest first; it shrinks as reviews are resolved.
CREATE INDEX reviews_open_idx ON reviews (created_at) WHERE resolved_at IS NULL;
