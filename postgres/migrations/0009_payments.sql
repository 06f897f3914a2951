-- Payments: one row per provider transaction, whatever became of it. A
-- payment is applied (it paid its order), late (to be refunded), refunding,
-- refunded, or in review; the payment path moves it, guarded by its status.
CREATE TABLE payments (
	id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	provider    text        NOT NULL,
	txn_id      text        NOT NULL,
	order_id    bigint      NOT NULL REFERENCES orders (id),
	order_no    text        NOT NULL,
	amount      bigint      NOT NULL CHECK (amount > 0),
	currency    text        NOT NULL,
	merchant    text        NOT NULL DEFAULT '',
	paid_at     timestamptz NOT NULL,
	status      text        NOT NULL,
	reason      text        NOT NULL DEFAULT '',
	refund_id   text        NOT NULL DEFAULT '',
	refunded_at timestamptz,
	raw         bytea       NOT NULL,
	created_at  timestamptz NOT NULL,
	updated_at  timestamptz NOT NULL,
	CONSTRAINT payments_provider_txn_key UNIQUE (provider, txn_id)
);

CREATE INDEX payments_order_idx ON payments (order_id, id);
-- Payments not yet settled (late, refunding, review) are few; reconcile and
-- the console read them from here.
CREATE INDEX payments_open_idx ON payments (id) WHERE status NOT IN ('applied', 'refunded');
