-- Payments held without an order: a verified callback reported a capture
-- for an order number Lapse does not have (it may have overtaken the
-- order's creation). One row per provider transaction. The engine's matcher
-- applies a held one through the payment path once its order exists, or
-- puts it in review after its window; an operator refunds or dismisses one
-- in review. payments.order_id is NOT NULL, so they wait here.
CREATE TABLE held_payments (
	id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	provider   text        NOT NULL,
	txn_id     text        NOT NULL,
	order_no   text        NOT NULL,
	amount     bigint      NOT NULL CHECK (amount > 0),
	currency   text        NOT NULL,
	merchant   text        NOT NULL DEFAULT '',
	paid_at    timestamptz NOT NULL,
	doubt      text        NOT NULL DEFAULT '',
	status     text        NOT NULL,
	reason     text        NOT NULL DEFAULT '',
	refund_id  text        NOT NULL DEFAULT '',
	by_whom    text        NOT NULL DEFAULT '',
	note       text        NOT NULL DEFAULT '',
	raw        bytea       NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	CONSTRAINT held_payments_provider_txn_key UNIQUE (provider, txn_id)
);

-- The matcher reads those held or refunding; the desk those in review.
CREATE INDEX held_payments_status_idx ON held_payments (status, id);
