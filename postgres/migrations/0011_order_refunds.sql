-- Merchant refunds of paid orders, each through the provider of the payment
-- that paid the order, under its own idempotency key.
CREATE TABLE order_refunds (
	id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	order_id   bigint      NOT NULL REFERENCES orders (id),
	order_no   text        NOT NULL,
	payment_id bigint      NOT NULL REFERENCES payments (id),
	provider   text        NOT NULL,
	txn_id     text        NOT NULL,
	amount     bigint      NOT NULL CHECK (amount > 0),
	currency   text        NOT NULL,
	reason     text        NOT NULL DEFAULT '',
	key        text        NOT NULL,
	status     text        NOT NULL,
	refund_id  text        NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	CONSTRAINT order_refunds_key_key UNIQUE (key)
);

CREATE INDEX order_refunds_order_idx ON order_refunds (order_id, id);
