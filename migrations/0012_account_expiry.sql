-- ACC-1 / RT-8: an account's own expiry (a subscription's end, set by an admin), in unix seconds.
-- Not the access token's expiry (token_expires_at): past it the account serves no request, whatever
-- its token says, until an admin moves or clears it.
ALTER TABLE accounts ADD COLUMN expires_at INTEGER;
