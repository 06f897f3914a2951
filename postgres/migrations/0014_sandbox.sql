-- The state of the built-in sandbox payment gateway (payment.Sandbox), so
-- that every process on this database sees one gateway. Every row belongs to
-- a gateway, the sandbox's provider name. The gateway's rules live in package
-- payment; these tables hold what it decided.

-- One row per order the gateway was asked about, which its operations lock
-- (SELECT … FOR UPDATE) before they read the order's payments.
CREATE TABLE sandbox_orders (
	gateway  text NOT NULL,
	order_no text NOT NULL,
	PRIMARY KEY (gateway, order_no)
);

-- Payments as the gateway sees them, by id in the order they were made, with
-- what was refunded of each and the body of the latest callback about it.
CREATE TABLE sandbox_payments (
	id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	gateway  text        NOT NULL,
	txn_id   text        NOT NULL,
	order_no text        NOT NULL,
	status   text        NOT NULL,
	amount   bigint      NOT NULL CHECK (amount >= 0),
	currency text        NOT NULL,
	merchant text        NOT NULL,
	paid_at  timestamptz,
	refunded bigint      NOT NULL,
	callback bytea,
	CONSTRAINT sandbox_payments_txn_key UNIQUE (gateway, txn_id),
	CONSTRAINT sandbox_payments_refunded_check CHECK (refunded BETWEEN 0 AND amount)
);

CREATE INDEX sandbox_payments_order_idx ON sandbox_payments (gateway, order_no, id);

-- Charges of stored payment methods, by idempotency key.
CREATE TABLE sandbox_charges (
	gateway  text   NOT NULL,
	key      text   NOT NULL,
	order_no text   NOT NULL,
	amount   bigint NOT NULL,
	currency text   NOT NULL,
	method   text   NOT NULL,
	txn_id   text   NOT NULL,
	PRIMARY KEY (gateway, key)
);

-- Refunds, by id in the order they were made, under their idempotency keys.
CREATE TABLE sandbox_refunds (
	id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	gateway   text   NOT NULL,
	key       text   NOT NULL,
	txn_id    text   NOT NULL,
	order_no  text   NOT NULL,
	amount    bigint NOT NULL CHECK (amount > 0),
	currency  text   NOT NULL,
	reason    text   NOT NULL,
	refund_id text   NOT NULL,
	status    text   NOT NULL,
	CONSTRAINT sandbox_refunds_key_key UNIQUE (gateway, key)
);

-- The secret that signs a gateway's callbacks and requests, kept for the
-- processes started without one of their own.
CREATE TABLE sandbox_gateways (
	gateway text  PRIMARY KEY,
	secret  bytea NOT NULL
);
