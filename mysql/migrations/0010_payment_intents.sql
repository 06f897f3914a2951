-- A payment intent: when the customer started paying, and through which
-- provider. Set once, by the payment-intent path, with the deadline moved
-- by the flow's grace in the same change; the closer reads it to ask the
-- provider before closing. pay_by is the end of the payment window (the
-- deadline plus the grace), which the PAY guard judges; deadline_at may
-- then move while the closer asks the provider.
ALTER TABLE orders
    ADD COLUMN intent_at BIGINT,
    ADD COLUMN intent_provider VARBINARY(1024) NOT NULL DEFAULT '',
    ADD COLUMN pay_by BIGINT;
