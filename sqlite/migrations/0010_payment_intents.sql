-- A payment intent: when the customer started paying, and through which
-- provider. Set once, by the payment-intent path, with the deadline moved
-- by the flow's grace in the same statement; the closer reads it to ask the
-- provider before closing. pay_by is the end of the payment window (the
-- deadline plus the grace), which the PAY guard judges; deadline_at may
-- then move while the closer asks the provider.
ALTER TABLE orders ADD COLUMN intent_at INTEGER;
ALTER TABLE orders ADD COLUMN intent_provider TEXT NOT NULL DEFAULT '';
ALTER TABLE orders ADD COLUMN pay_by INTEGER;
