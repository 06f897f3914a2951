-- Members of group buys: a group is an order, and each member is charged the
-- group's price through the provider port, under the member's own
-- idempotency key, once the group closes. A user joins a group once.
CREATE TABLE group_members (
	id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	order_id   bigint      NOT NULL REFERENCES orders (id),
	group_id   text        NOT NULL,
	user_id    text        NOT NULL,
	provider   text        NOT NULL,
	method     text        NOT NULL,
	amount     bigint      NOT NULL CHECK (amount > 0),
	currency   text        NOT NULL,
	key        text        NOT NULL,
	status     text        NOT NULL,
	attempts   int         NOT NULL DEFAULT 0,
	txn_id     text        NOT NULL DEFAULT '',
	last_error text        NOT NULL DEFAULT '',
	joined_at  timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	charged_at timestamptz,
	CONSTRAINT group_members_key_key UNIQUE (key),
	CONSTRAINT group_members_order_user_key UNIQUE (order_id, user_id)
);

CREATE INDEX group_members_order_idx ON group_members (order_id, id);
