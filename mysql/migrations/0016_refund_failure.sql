-- Why the provider (or the missing port) refused a merchant refund, kept on
-- the refund for the merchant and operators.
ALTER TABLE order_refunds ADD COLUMN failure TEXT NOT NULL DEFAULT ('');
