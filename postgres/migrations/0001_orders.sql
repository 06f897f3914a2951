-- Orders: the single source of truth of every order's state.
CREATE TABLE orders (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	order_no     text        NOT NULL,
	flow         text        NOT NULL,
	state        text        NOT NULL,
	deadline_at  timestamptz,
	amount       bigint      NOT NULL,
	currency     text        NOT NULL,
	user_id      text        NOT NULL,
	items        jsonb,
	coupon       text        NOT NULL DEFAULT '',
	-- json, not jsonb: the caller's bytes come back exactly as sent.
	metadata     json,
	version      bigint      NOT NULL,
	created_at   timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL,
	closed_at    timestamptz,
	close_reason text        NOT NULL DEFAULT '',
	fired_by     text        NOT NULL DEFAULT '',
	request_hash text        NOT NULL DEFAULT '',
	CONSTRAINT orders_order_no_key UNIQUE (order_no)
);

-- The durable timer. Only orders waiting on a deadline are in it, so it stays
-- as small as the pending set however long the history grows. flow rides
-- along so that the next-deadline query is an index-only scan.
CREATE INDEX orders_due_idx ON orders (deadline_at) INCLUDE (flow) WHERE deadline_at IS NOT NULL;

-- Newest-first listings, keyset-paged on (created_at, id).
CREATE INDEX orders_created_idx ON orders (created_at DESC, id DESC);
CREATE INDEX orders_user_idx ON orders (user_id, created_at DESC, id DESC);
CREATE INDEX orders_state_idx ON orders (state, created_at DESC, id DESC);
