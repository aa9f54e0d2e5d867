-- wrk script for load_test.sh: counts the answers by status and keeps the
-- first bodies and headers of answers that are not 200, so a refused
-- scrape says what refused it (the exporter's bodies say why).
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  counts = {}
  bad = ""
  nbad = 0
end
function response(status, headers, body)
  counts[status] = (counts[status] or 0) + 1
  if status ~= 200 then
    nbad = nbad + 1
    if nbad <= 20 then
      local h = ""
      for k, v in pairs(headers) do h = h .. k .. "=" .. v .. "; " end
      bad = bad .. string.format("[%d] %s | %s\n", status, (body or ""):sub(1, 200):gsub("\n", "\\n"), h)
    end
  end
end
function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("counts")) do total[k] = (total[k] or 0) + v end
    local b = t:get("bad")
    if b ~= "" then io.write("not 200:\n", b) end
  end
  for k, v in pairs(total) do io.write(string.format("status %d: %d\n", k, v)) end
end
