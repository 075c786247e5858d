-- wrk script: one X-Forwarded-For client address per request, cycling through $KEYS
-- addresses (10.0.0.0 upwards), so the proxy under test sees that many distinct clients.
-- $START is the first key's index (a warm-up in several runs continues where it stopped).
local keys = tonumber(os.getenv("KEYS") or "1")
local n = tonumber(os.getenv("START") or "0")

request = function()
  local k = n % keys
  n = n + 1
  local ip = string.format("10.%d.%d.%d", math.floor(k / 65536) % 256, math.floor(k / 256) % 256, k % 256)
  return wrk.format("GET", "/", { ["X-Forwarded-For"] = ip })
end
