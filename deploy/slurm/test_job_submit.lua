--[[
Self-test of job_submit.lua without Slurm and without the service:
stubs the `slurm` table and io.popen (the fake "curl" reads the curl config
file the plugin writes, records the request and answers canned responses).

  lua5.4 deploy/slurm/test_job_submit.lua      (also lua5.1 ... lua5.3)

With JOULECAST_TEST_URL set (e.g. http://127.0.0.1:18080), one more test runs
the real curl against that address, which must answer POST /v1/admission
with a 200 JSON body.
]]

local here = (arg and arg[0] and string.match(arg[0], "^(.*)/[^/]*$")) or "."

local failures, passed = 0, 0
local function check(cond, what)
	if cond then
		passed = passed + 1
	else
		failures = failures + 1
		io.stderr:write("FAIL: " .. what .. "\n")
	end
end
local function eq(got, want, what)
	check(got == want, what .. "\n   got:  " .. tostring(got) .. "\n   want: " .. tostring(want))
end

-- The slurm table the job_submit/lua plugin provides.
local logs, user_msgs = {}, {}
slurm = {
	SUCCESS = 0, ERROR = -1, FAILURE = -1,
	NO_VAL = 4294967294, INFINITE = 4294967295,
	ESLURM_ACCOUNTING_POLICY = 2050, ESLURM_INVALID_ACCOUNT = 2045,
}
for _, level in ipairs({ "info", "error", "debug", "verbose" }) do
	slurm["log_" .. level] = function(fmt, ...)
		logs[#logs + 1] = level .. ": " .. string.format(fmt, ...)
	end
end
slurm.log_user = function(fmt, ...)
	user_msgs[#user_msgs + 1] = string.format(fmt, ...)
end

local token_file = os.tmpname()
do
	local f = assert(io.open(token_file, "w"))
	f:write("jc_TestToken-_0123456789\n")
	f:close()
end

JOULECAST_CONFIG_OVERRIDE = {
	URL = "http://joulecast.test:8080",
	TOKEN_FILE = token_file,
	CURL = "/usr/bin/curl",
}
JOULECAST_SELFTEST = {}
dofile(here .. "/job_submit.lua")
local T = JOULECAST_SELFTEST

---------------------------------------------------------------------------
-- Fake curl
---------------------------------------------------------------------------
local real_popen = io.popen
local calls = {}
local next_answer -- {status = "200", body = "..."}, or {status = "000", err = "..."}

local function slurp(path)
	local f = io.open(path, "rb")
	if not f then return nil end
	local d = f:read("*a")
	f:close()
	return d
end

local function unquote(v) -- a curl config value as written by the plugin
	local q = string.match(v, '^"(.*)"$')
	if not q then return v end
	return (string.gsub(q, "\\(.)", "%1"))
end

io.popen = function(cmd, mode)
	local cfg_path = string.match(cmd, "%-%-config '([^']+)'$")
	local call = { cmd = cmd, headers = {}, files = {} }
	local cfg = cfg_path and slurp(cfg_path) or ""
	call.cfg = cfg
	for line in string.gmatch(cfg, "[^\n]+") do
		local k, v = string.match(line, "^([%w%-]+) = (.*)$")
		if k == "header" then
			call.headers[#call.headers + 1] = unquote(v)
		elseif k then
			call[k] = unquote(v)
		end
	end
	if call["data-binary"] then
		call.body_path = string.sub(call["data-binary"], 2)
		call.body = slurp(call.body_path)
	end
	calls[#calls + 1] = call
	local a = next_answer or { status = "000", err = "curl: (7) no answer configured" }
	if a.body and call.output then
		local f = assert(io.open(call.output, "wb"))
		f:write(a.body)
		f:close()
	end
	if a.err and call.stderr then
		local f = assert(io.open(call.stderr, "wb"))
		f:write(a.err .. "\n")
		f:close()
	end
	local done = false
	return {
		read = function()
			if done then return nil end
			done = true
			return a.status
		end,
		close = function() return true end,
	}
end

local function job(t)
	local j = {
		name = "lammps", min_nodes = 4, account = "proj42", partition = "compute",
		time_limit = 60, comment = "user comment", user_id = 1000,
	}
	for k, v in pairs(t or {}) do
		if v == "nil" then j[k] = nil else j[k] = v end
	end
	return j
end

local ADMIT = [[{"admit": true, "reasons": ["fits"],
 "prediction": {"apc_w": 1850.0, "ets_j": 6.6e6, "tts_s": 3580.0},
 "power": {"fits": true, "cap_w": 500000.0, "headroom_before_w": 20000.0,
           "predicted_apc_w": 1900.0, "basis": "worst_nodes", "headroom_after_w": 18300.0},
 "energy": {"fits": true, "account": "proj42", "remaining_j": 1.0e9,
            "predicted_ets_j": 6.6e6, "remaining_after_j": 0.99e9}}]]

local function reset()
	calls, logs, user_msgs = {}, {}, {}
	T.reset_backoff()
	T.CONFIG.FAIL_OPEN = true
end

---------------------------------------------------------------------------
-- JSON encoding and decoding
---------------------------------------------------------------------------
eq(T.json_string('a"b\\c\n\t\1/é'), '"a\\"b\\\\c\\n\\t\\u0001/é"', "string escaping")
eq(T.json_object({ { "a", 1 }, { "b", nil }, { "c", 4.0 }, { "d", 2.5 }, { "e", true }, { "f", "x" } }),
	'{"a":1,"c":4,"d":2.5,"e":true,"f":"x"}', "flat object, nil left out, 4.0 as 4")
eq(T.json_object({ { "n", 4294967294 } }), '{"n":4294967294}', "large integer")
for _, s in ipairs({ 'we"ird', "back\\slash", "tab\there", "nl\nx", "\\u0041", "q'\"$(x)`y`", "ctl\1\31" }) do
	eq(T.decode_string(T.json_string(s)), s, "round trip of " .. string.format("%q", s))
end
eq(T.decode_string('"\\u00e9\\u0041\\/"'), "éA/", "\\u escapes decode")
eq(T.decode_string('"\\\\u0041"'), "\\u0041", "escaped backslash before u")

local m = T.object_members('{"a": "x}y\\"{", "b": {"c": [1, {"d": "]"}]}, "e": null, "f": -1.5e3, "g": false}')
check(m ~= nil, "object with tricky strings parses")
if m then
	eq(T.decode_string(m.a), 'x}y"{', "member a")
	eq(m.b, '{"c": [1, {"d": "]"}]}', "member b raw")
	eq(m.e, "null", "member e")
	eq(tonumber(m.f), -1500, "member f")
	eq(m.g, "false", "member g")
	local b = T.object_members(m.b)
	local items = T.array_items(b and b.c)
	eq(items and #items, 2, "array items")
end
check(T.object_members("not json") == nil, "garbage is not an object")
check(T.object_members('{"a": 1') == nil, "truncated object is rejected")

eq(T.merge_admin_comment(nil, "joulecast:x=1"), "joulecast:x=1", "admin comment from nothing")
eq(T.merge_admin_comment("site:a joulecast:old other", "joulecast:new"), "site:a other joulecast:new",
	"admin comment keeps other words, replaces ours")

---------------------------------------------------------------------------
-- Submission
---------------------------------------------------------------------------
-- 1. The request: body, headers, nothing job-controlled on the command line.
reset()
next_answer = { status = "200", body = ADMIT }
local evil = 'x"; rm -rf / #\'$(touch /tmp/pwned)`id`\n'
local j = job({ name = evil })
eq(slurm_job_submit(j, {}, 1000), slurm.SUCCESS, "admitted job is accepted")
eq(#calls, 1, "one request")
local c = calls[1]
-- The name is not a tag: it stands for the application its mapping names.
eq(c.body, '{"app":"x---rm--rf-------touch--tmp-pwned--id--"'
	.. ',"nodes":4,"partition":"compute","account":"proj42","time_limit_s":3600}', "request body")
eq(c.url, "http://joulecast.test:8080/v1/admission", "request URL")
eq(c.request, "POST", "method")
eq(c.headers[1], "Authorization: Bearer jc_TestToken-_0123456789", "token header")
check(string.find(c.cmd, "rm -rf", 1, true) == nil and string.find(c.cmd, "jc_Test", 1, true) == nil,
	"neither the job name nor the token is on the command line")
check(string.match(c.cmd, "^'/usr/bin/curl' %-%-disable %-%-config '[^']+'$") ~= nil,
	"command line is curl --disable --config FILE: " .. c.cmd)
eq(j.admin_comment, "joulecast:ets_j=6.6e+06;apc_w=1850;tts_s=3580", "prediction in admin_comment")
eq(j.comment, "user comment", "user comment untouched")
check(slurp(c.body_path) == nil and slurp(c.output) == nil and slurp(c.stderr) == nil,
	"temporary files are removed")
check(string.match(c.cfg, 'max%-time = 2\n') ~= nil, "max-time in the curl config")

-- 2. NO_VAL / INFINITE handling.
reset()
next_answer = { status = "200", body = ADMIT }
j = job({ min_nodes = slurm.NO_VAL })
eq(slurm_job_submit(j, {}, 1000), slurm.SUCCESS, "no node count: accepted")
eq(#calls, 0, "no node count: no request")
eq(j.admin_comment, nil, "no node count: no admin_comment")

T.CONFIG.DEFAULT_NODES = 1
j = job({ min_nodes = slurm.NO_VAL })
slurm_job_submit(j, {}, 1000)
eq(calls[1] and string.match(calls[1].body, '"nodes":(%d+)'), "1", "DEFAULT_NODES used")
T.CONFIG.DEFAULT_NODES = nil

reset()
next_answer = { status = "200", body = ADMIT }
slurm_job_submit(job({ time_limit = slurm.NO_VAL }), {}, 1000)
slurm_job_submit(job({ time_limit = slurm.INFINITE }), {}, 1000)
slurm_job_submit(job({ time_limit = 90, min_nodes = 2.0 }), {}, 1000)
check(string.find(calls[1].body, "time_limit_s", 1, true) == nil, "NO_VAL time limit left out")
check(string.find(calls[2].body, "time_limit_s", 1, true) == nil, "INFINITE time limit left out")
check(string.find(calls[3].body, '"nodes":2,', 1, true) ~= nil, "float node count sent as integer")
check(string.find(calls[3].body, '"time_limit_s":5400}', 1, true) ~= nil, "minutes to seconds")

reset()
next_answer = { status = "200", body = ADMIT }
slurm_job_submit(job({ account = "nil", default_account = "dflt", partition = "a,b" }), {}, 1000)
eq(calls[1].body, '{"app":"lammps","nodes":4,"account":"dflt","time_limit_s":3600}',
	"default account; several partitions left out")

reset()
next_answer = { status = "200", body = ADMIT }
slurm_job_submit(job({ name = "nil" }), {}, 1000)
eq(#calls, 1, "no job name: a request all the same")
check(string.find(calls[1].body, '{"app":"unnamed",', 1, true) ~= nil, "no job name: the catch-all application")

reset()
next_answer = { status = "200", body = ADMIT }
slurm_job_submit(job({ name = "my job!", account = "(null)", default_account = "(null)" }), {}, 1000)
eq(calls[1].body, '{"app":"my-job-","nodes":4,"partition":"compute","time_limit_s":3600}',
	"a name that is no tag is mapped; (null) is no account")

-- 3. Budget policy.
reset()
next_answer = { status = "200", body = [[{"admit": false, "reasons": ["energy budget of proj42 exhausted"],
 "prediction": {"apc_w": 1850.0, "ets_j": 6.6e6, "tts_s": 3580.0},
 "power": {"fits": true, "cap_w": null, "headroom_before_w": null, "predicted_apc_w": 1900.0,
           "basis": "worst_nodes", "headroom_after_w": null},
 "energy": {"fits": false, "account": "proj42", "remaining_j": 3.6e6,
            "predicted_ets_j": 6.6e6, "remaining_after_j": -3.0e6}}]] }
j = job()
eq(slurm_job_submit(j, {}, 1000), slurm.ESLURM_ACCOUNTING_POLICY, "over budget: rejected")
check(user_msgs[1] and string.find(user_msgs[1], "account proj42", 1, true) ~= nil
	and string.find(user_msgs[1], "remaining 1 kWh, this job needs about 1.83 kWh).", 1, true) ~= nil
	and string.find(user_msgs[1], "Why: energy budget of proj42 exhausted.", 1, true) ~= nil,
	"over budget: user message: " .. tostring(user_msgs[1]))
eq(j.admin_comment, nil, "rejected: no admin_comment")

-- Used up, and no estimate of the job's energy: said so, reasons apart.
reset()
next_answer = { status = "200", body = [[{"admit": false,
 "reasons": ["power: no cap is in force for the whole system", "energy: account proj42's budget is used up"],
 "prediction": {"apc_w": null, "ets_j": null, "tts_s": null}, "power": {"fits": true},
 "energy": {"fits": false, "account": "proj42", "remaining_j": -464400,
            "predicted_ets_j": null, "remaining_after_j": null}}]] }
eq(slurm_job_submit(job(), {}, 1000), slurm.ESLURM_ACCOUNTING_POLICY, "used up: rejected")
check(user_msgs[1] and string.find(user_msgs[1], "(nothing left: -0.129 kWh).", 1, true) ~= nil
	and string.find(user_msgs[1], "unknown", 1, true) == nil
	and string.find(user_msgs[1], "whole system; energy: account", 1, true) ~= nil,
	"used up: user message: " .. tostring(user_msgs[1]))

T.CONFIG.ENFORCE_ENERGY_BUDGET = false
reset()
eq(slurm_job_submit(job(), {}, 1000), slurm.SUCCESS, "budget not enforced: accepted")
T.CONFIG.ENFORCE_ENERGY_BUDGET = true

-- 4. Power does not count at submission.
reset()
next_answer = { status = "200", body = [[{"admit": false, "reasons": ["over the cap"],
 "prediction": {"apc_w": null, "ets_j": null, "tts_s": null},
 "power": {"fits": false, "cap_w": 1000.0, "headroom_before_w": 10.0, "predicted_apc_w": 4000.0,
           "basis": "no_history", "headroom_after_w": -3990.0},
 "energy": {"fits": true, "account": "proj42", "remaining_j": null, "predicted_ets_j": null,
            "remaining_after_j": null}}]] }
j = job()
eq(slurm_job_submit(j, {}, 1000), slurm.SUCCESS, "over the power cap: still accepted at submission")
eq(j.admin_comment, "joulecast:no_history", "no history noted")

-- 5. Existing admin comment.
reset()
next_answer = { status = "200", body = ADMIT }
j = job({ admin_comment = "joulecast:ets_j=1 keep" })
slurm_job_submit(j, {}, 1000)
eq(j.admin_comment, "keep joulecast:ets_j=6.6e+06;apc_w=1850;tts_s=3580", "earlier prediction replaced")

-- 6. Failures: fail open, back off; fail closed when configured.
reset()
next_answer = { status = "000", err = "curl: (7) Failed to connect" }
j = job()
eq(slurm_job_submit(j, {}, 1000), slurm.SUCCESS, "unreachable: accepted (fail open)")
eq(j.admin_comment, "joulecast:unchecked", "unreachable: the job says it went unchecked")
eq(slurm_job_submit(job(), {}, 1000), slurm.SUCCESS, "unreachable again: accepted")
eq(#calls, 1, "backoff: the second submission does not ask")
local logged = table.concat(logs, "\n")
check(string.find(logged, "Failed to connect", 1, true) ~= nil, "curl's error is logged")

reset()
next_answer = { status = "503", body = '{"status": 503, "detail": "database unavailable"}' }
eq(slurm_job_submit(job(), {}, 1000), slurm.SUCCESS, "503: accepted")
reset()
next_answer = { status = "422", body = [[{"type":"urn:joulecast:problem:validation","title":"Invalid request",
 "status":422,"detail":"1 field is invalid","errors":[{"field":"app","reason":"contains ' '"}]}]] }
eq(slurm_job_submit(job({ name = "my job" }), {}, 1000), slurm.SUCCESS, "422: accepted")
check(string.find(table.concat(logs, "\n"), "app: contains ' '", 1, true) ~= nil, "422 detail logged")
eq(#calls, 1, "422 asked")
slurm_job_submit(job(), {}, 1000)
eq(#calls, 2, "no backoff after a 4xx")

reset()
T.CONFIG.FAIL_OPEN = false
next_answer = { status = "000", err = "curl: (28) timeout" }
local rc = slurm_job_submit(job(), {}, 1000)
eq(rc, slurm.ESLURM_ACCOUNTING_POLICY, "unreachable with FAIL_OPEN=false: rejected")
check(user_msgs[1] ~= nil, "fail closed: the user is told")
T.CONFIG.FAIL_OPEN = true

reset()
local saved = T.CONFIG.TOKEN_FILE
T.CONFIG.TOKEN_FILE = "/nonexistent/joulecast.token"
eq(slurm_job_submit(job(), {}, 1000), slurm.SUCCESS, "missing token file: accepted")
eq(#calls, 0, "missing token file: no request")
T.CONFIG.TOKEN_FILE = saved

reset()
next_answer = { status = "200", body = "<html>proxy error</html>" }
eq(slurm_job_submit(job(), {}, 1000), slurm.SUCCESS, "unreadable answer: accepted")

---------------------------------------------------------------------------
-- Modification
---------------------------------------------------------------------------
local OVER = [[{"admit": false, "reasons": [], "prediction": {"apc_w": 1.0, "ets_j": 9e9, "tts_s": 1.0},
 "power": {"fits": true}, "energy": {"fits": false, "account": "poor", "remaining_j": 0,
 "predicted_ets_j": 9e9, "remaining_after_j": -9e9}}]]
local rec = { job_id = 77, job_state = 0, name = "lammps", min_nodes = 8, account = "proj42",
	partition = "compute", time_limit = 30, comment = "c" }
local nochange = { min_nodes = slurm.NO_VAL, time_limit = slurm.NO_VAL }

reset()
next_answer = { status = "200", body = OVER }
eq(slurm_job_modify(nochange, rec, {}, 1000), slurm.SUCCESS, "modify without relevant change: accepted")
eq(#calls, 0, "modify without relevant change: no request")
eq(slurm_job_modify({ account = "poor", min_nodes = slurm.NO_VAL, time_limit = slurm.NO_VAL }, rec, {}, 1000),
	slurm.ESLURM_ACCOUNTING_POLICY, "modify to an exhausted account: rejected")
eq(calls[1] and calls[1].body, '{"app":"lammps","nodes":8,"partition":"compute","account":"poor","time_limit_s":1800}',
	"modify: merged request")
eq(slurm_job_modify({ account = "poor" }, rec, {}, 0), slurm.SUCCESS, "modify by root: accepted")
local running = { job_id = 78, job_state = 1, name = "lammps", min_nodes = 8, account = "proj42" }
eq(slurm_job_modify({ account = "poor" }, running, {}, 1000), slurm.SUCCESS, "running job: not checked")
local d = { account = "poor" }
slurm_job_modify(d, rec, {}, 1000)
eq(d.admin_comment, nil, "modify never sets admin_comment")

---------------------------------------------------------------------------
-- Optional: the real curl against a test server
---------------------------------------------------------------------------
io.popen = real_popen
local live = os.getenv("JOULECAST_TEST_URL")
if live and live ~= "" then
	reset()
	T.CONFIG.URL = live
	j = job({ name = 'live"test' })
	eq(slurm_job_submit(j, {}, 1000), slurm.SUCCESS, "live: accepted")
	check(j.admin_comment ~= nil and string.find(j.admin_comment, "joulecast:", 1, true) == 1,
		"live: admin_comment set: " .. tostring(j.admin_comment) .. "\n" .. table.concat(logs, "\n"))
	T.CONFIG.URL = "http://127.0.0.1:9" -- nothing listens on the discard port
	reset()
	j = job()
	eq(slurm_job_submit(j, {}, 1000), slurm.SUCCESS, "live, unreachable: accepted")
	check(string.find(table.concat(logs, "\n"), "admission request failed", 1, true) ~= nil,
		"live, unreachable: logged: " .. table.concat(logs, "\n"))
end

os.remove(token_file)
print(string.format("%s: %d checks passed, %d failed", _VERSION, passed, failures))
os.exit(failures == 0 and 0 or 1)
