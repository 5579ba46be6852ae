--[[
Joulecast job_submit/lua plugin (example).

At submission, asks Joulecast's POST /v1/admission what the job will need and
  * records the prediction in the job's AdminComment, as
    "joulecast:ets_j=6.6e+06;apc_w=1850;tts_s=3580" (the user's own Comment
    is left alone);
  * rejects the job when its account's energy budget cannot cover it.
Power is NOT enforced here: whether a job fits under the power cap depends on
what runs when it starts, so the cap is enforced at dispatch by
prolog_slurmctld.sh.

Install: copy to job_submit.lua in the directory of slurm.conf and set
JobSubmitPlugins=lua. See README.md.

Notes for administrators:
  * slurmctld runs this synchronously while it holds its job lock, so every
    call to the service delays the controller by up to TIMEOUT_S. After a
    failure the plugin stops asking for BACKOFF_S seconds.
  * Only constants and temporary-file names reach the shell: the job's fields
    travel in a temporary file, the token in a temporary curl config file
    (os.tmpname uses mkstemp in POSIX builds of Lua: mode 0600), never on a
    command line.
  * No external Lua modules: a small JSON encoder for flat objects and a
    small scanner for the few answer fields used. Works with Lua 5.1 to 5.4.
]]

---------------------------------------------------------------------------
-- Configuration
---------------------------------------------------------------------------
local CONFIG = {
	-- Base URL of the Joulecast service (no trailing slash).
	URL = "http://joulecast.example.org:8080",
	-- A token with scope `schedule`, alone on the first line; the file should
	-- be readable by SlurmUser only (chmod 0400, owned by slurm).
	TOKEN_FILE = "/etc/slurm/joulecast.token",
	CURL = "/usr/bin/curl",
	-- Whole-request time limit, and for the connection alone (seconds).
	TIMEOUT_S = 2,
	CONNECT_TIMEOUT_S = 1,
	-- When the service is unreachable, or answers anything but 200: accept
	-- the job (true), or reject it (false). A scheduler should not stop
	-- because the prediction service is down: keep true unless you mean it.
	FAIL_OPEN = true,
	-- After a failure to reach the service, do not ask again for this many
	-- seconds (the state lives in slurmctld's Lua state; a reload resets it).
	BACKOFF_S = 60,
	-- Reject a job whose account's energy budget cannot cover it.
	ENFORCE_ENERGY_BUDGET = true,
	-- The Slurm error returned on rejection; falls back to slurm.ERROR when
	-- this Slurm does not define it.
	REJECT_ERROR = "ESLURM_ACCOUNTING_POLICY",
	-- Where the application tag comes from: "jobname", "comment" or "wckey".
	-- Use the same as the sacct importer's app_from.
	APP_FROM = "jobname",
	-- Node count assumed when the job gives none (e.g. only --ntasks);
	-- nil: no prediction for such jobs (they are accepted).
	DEFAULT_NODES = nil,
	-- Prefix of the prediction in AdminComment.
	COMMENT_TAG = "joulecast:",
}

-- For the self-test (test_job_submit.lua): a table of overrides.
if type(JOULECAST_CONFIG_OVERRIDE) == "table" then
	for k, v in pairs(JOULECAST_CONFIG_OVERRIDE) do
		CONFIG[k] = v
	end
end

local SUCCESS = slurm.SUCCESS or 0
local ERROR = slurm.ERROR or -1
local NO_VAL = slurm.NO_VAL or 4294967294
local INFINITE = slurm.INFINITE or 4294967295
local JOB_STATE_BASE = 256 -- job_state % 256 is the base state
local JOB_PENDING = 0

---------------------------------------------------------------------------
-- Logging (the slurm.log_* functions take a format string)
---------------------------------------------------------------------------
local function log(level, msg)
	local f = slurm["log_" .. level] or slurm.log_info
	if f then
		f("%s", "joulecast: " .. msg)
	end
end

local function tell_user(msg)
	if slurm.log_user then
		slurm.log_user("%s", msg)
	end
end

---------------------------------------------------------------------------
-- JSON: encoder for flat objects
---------------------------------------------------------------------------
local ESCAPES = {
	['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
	["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}

local function json_string(s)
	local escaped = string.gsub(s, '[%c"\\]', function(c)
		return ESCAPES[c] or string.format("\\u%04x", string.byte(c))
	end)
	return '"' .. escaped .. '"'
end

local function json_number(n)
	if n ~= n or n == math.huge or n == -math.huge then
		error("not a finite number: " .. tostring(n))
	end
	-- Integers without a fraction: Slurm hands numbers over as floats, and
	-- "4.0" is not an integer to a strict JSON reader.
	if n == math.floor(n) and math.abs(n) < 2 ^ 53 then
		return string.format("%d", n)
	end
	return string.format("%.17g", n)
end

-- fields: array of {key, value}; nil values are left out, order is kept.
local function json_object(fields)
	local parts = {}
	for _, kv in ipairs(fields) do
		local k, v = kv[1], kv[2]
		local t = type(v)
		local enc
		if t == "string" then
			enc = json_string(v)
		elseif t == "number" then
			enc = json_number(v)
		elseif t == "boolean" then
			enc = tostring(v)
		elseif v ~= nil then
			error("cannot encode a " .. t .. " for " .. k)
		end
		if enc then
			parts[#parts + 1] = json_string(k) .. ":" .. enc
		end
	end
	return "{" .. table.concat(parts, ",") .. "}"
end

---------------------------------------------------------------------------
-- JSON: scanner for answers (one level at a time, raw member texts)
---------------------------------------------------------------------------
local function skip_ws(s, i)
	return string.find(s, "[^ \t\r\n]", i) or (#s + 1)
end

-- s:sub(i, i) is '"': the index of the closing quote.
local function string_end(s, i)
	local j = i + 1
	while true do
		local k = string.find(s, '["\\]', j)
		if not k then
			return nil
		end
		if string.sub(s, k, k) == "\\" then
			j = k + 2
		else
			return k
		end
	end
end

-- The index of the last character of the value starting at i.
local function value_end(s, i)
	local c = string.sub(s, i, i)
	if c == '"' then
		return string_end(s, i)
	end
	if c == "{" or c == "[" then
		local depth, j = 0, i
		while true do
			local k = string.find(s, '[%[%]{}"]', j)
			if not k then
				return nil
			end
			local ch = string.sub(s, k, k)
			if ch == '"' then
				local e = string_end(s, k)
				if not e then
					return nil
				end
				j = e + 1
			else
				depth = depth + ((ch == "{" or ch == "[") and 1 or -1)
				if depth == 0 then
					return k
				end
				j = k + 1
			end
		end
	end
	local k = string.find(s, "[%s,%]}]", i)
	if k == i or i > #s then
		return nil
	end
	return (k or (#s + 1)) - 1
end

local function utf8_char(cp)
	if cp < 0x80 then
		return string.char(cp)
	elseif cp < 0x800 then
		return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64)
	end
	return string.char(0xE0 + math.floor(cp / 4096),
		0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

local UNESCAPES = {
	['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f",
	n = "\n", r = "\r", t = "\t",
}

-- The text of a raw JSON string (with its quotes); nil if not a string.
local function decode_string(raw)
	if type(raw) ~= "string" or not string.match(raw, '^".*"$') then
		return nil
	end
	local body = string.sub(raw, 2, -2)
	-- One pass, so that an escaped backslash before "u" stays a backslash.
	body = string.gsub(body, "\\(.)(%x?%x?%x?%x?)", function(c, hex)
		if c ~= "u" then
			return (UNESCAPES[c] or c) .. hex
		end
		if #hex < 4 then
			return "?" .. hex
		end
		local cp = tonumber(hex, 16)
		if cp >= 0xD800 and cp <= 0xDFFF then
			return "?" -- surrogate halves: not worth pairing here
		end
		return utf8_char(cp)
	end)
	return body
end

local function decode_number(raw)
	if type(raw) ~= "string" or not string.match(raw, "^%-?%d[%d%.eE+%-]*$") then
		return nil
	end
	return tonumber(raw)
end

local function decode_bool(raw)
	if raw == "true" then
		return true
	elseif raw == "false" then
		return false
	end
	return nil
end

-- The members of a JSON object: {key = raw value text}; nil if not an object.
local function object_members(s)
	if type(s) ~= "string" then
		return nil
	end
	local i = skip_ws(s, 1)
	if string.sub(s, i, i) ~= "{" then
		return nil
	end
	local out = {}
	i = skip_ws(s, i + 1)
	if string.sub(s, i, i) == "}" then
		return out
	end
	while true do
		if string.sub(s, i, i) ~= '"' then
			return nil
		end
		local ke = string_end(s, i)
		if not ke then
			return nil
		end
		local key = decode_string(string.sub(s, i, ke))
		i = skip_ws(s, ke + 1)
		if string.sub(s, i, i) ~= ":" then
			return nil
		end
		i = skip_ws(s, i + 1)
		local ve = value_end(s, i)
		if not ve then
			return nil
		end
		out[key] = string.sub(s, i, ve)
		i = skip_ws(s, ve + 1)
		local c = string.sub(s, i, i)
		if c == "}" then
			return out
		elseif c ~= "," then
			return nil
		end
		i = skip_ws(s, i + 1)
	end
end

-- The raw items of a JSON array; nil if not an array.
local function array_items(s)
	if type(s) ~= "string" then
		return nil
	end
	local i = skip_ws(s, 1)
	if string.sub(s, i, i) ~= "[" then
		return nil
	end
	local out = {}
	i = skip_ws(s, i + 1)
	if string.sub(s, i, i) == "]" then
		return out
	end
	while true do
		local ve = value_end(s, i)
		if not ve then
			return nil
		end
		out[#out + 1] = string.sub(s, i, ve)
		i = skip_ws(s, ve + 1)
		local c = string.sub(s, i, i)
		if c == "]" then
			return out
		elseif c ~= "," then
			return nil
		end
		i = skip_ws(s, i + 1)
	end
end

---------------------------------------------------------------------------
-- HTTP through curl
---------------------------------------------------------------------------
local function shell_quote(s)
	return "'" .. string.gsub(s, "'", "'\\''") .. "'"
end

-- A value for a curl config file (double-quoted; \ and " escaped).
local function curl_quote(s)
	if string.find(s, "%c") then
		error("control character in a curl option value")
	end
	return '"' .. string.gsub(s, '[\\"]', "\\%0") .. '"'
end

local function read_file(path, limit)
	local f = io.open(path, "rb")
	if not f then
		return nil
	end
	local data = f:read(limit or "*a")
	f:close()
	return data
end

local function write_file(path, data)
	local f, err = io.open(path, "wb")
	if not f then
		error("cannot write " .. path .. ": " .. tostring(err))
	end
	f:write(data)
	f:close()
end

local function read_token()
	local line = read_file(CONFIG.TOKEN_FILE, 4096)
	if not line then
		return nil, "cannot read the token file " .. CONFIG.TOKEN_FILE
	end
	local token = string.match(line, "^%s*(%S+)")
	if not token or not string.match(token, "^[%w%-%._~%+/=]+$") then
		return nil, "the token file " .. CONFIG.TOKEN_FILE .. " holds no valid token"
	end
	return token
end

-- POST a JSON body; returns status (number; 0 when no answer), body, error.
local function http_post(path, body)
	local token, terr = read_token()
	if not token then
		return 0, nil, terr
	end
	local files = {}
	local function tmp()
		local p = os.tmpname()
		files[#files + 1] = p
		return p
	end
	local ok, status, answer, err = pcall(function()
		local cfg, req, out, errf = tmp(), tmp(), tmp(), tmp()
		write_file(req, body)
		write_file(cfg, table.concat({
			"silent",
			"show-error",
			"url = " .. curl_quote(CONFIG.URL .. path),
			"proto = " .. curl_quote("=http,https"),
			"request = POST",
			"header = " .. curl_quote("Authorization: Bearer " .. token),
			"header = " .. curl_quote("Content-Type: application/json"),
			"header = " .. curl_quote("Accept: application/json"),
			"data-binary = " .. curl_quote("@" .. req),
			"output = " .. curl_quote(out),
			"stderr = " .. curl_quote(errf),
			"write-out = " .. curl_quote("%{http_code}"),
			"max-time = " .. tostring(CONFIG.TIMEOUT_S),
			"connect-timeout = " .. tostring(CONFIG.CONNECT_TIMEOUT_S),
			"max-filesize = 1048576",
		}, "\n") .. "\n")
		-- --disable (first): no ~/.curlrc. Only constants and temporary-file
		-- names are on this command line.
		local cmd = shell_quote(CONFIG.CURL) .. " --disable --config " .. shell_quote(cfg)
		local p = io.popen(cmd, "r")
		if not p then
			return 0, nil, "cannot run " .. CONFIG.CURL
		end
		local code = p:read("*a") or ""
		p:close()
		local n = tonumber(string.match(code, "^%s*(%d%d%d)%s*$"))
		if not n or n == 0 then
			local msg = read_file(errf, 1024) or ""
			msg = string.gsub(msg, "%s+$", "")
			return 0, nil, (msg ~= "" and msg) or "no answer"
		end
		return n, read_file(out, 1048576) or "", nil
	end)
	for _, p in ipairs(files) do
		os.remove(p)
	end
	if not ok then
		return 0, nil, tostring(status)
	end
	return status, answer, err
end

---------------------------------------------------------------------------
-- Admission
---------------------------------------------------------------------------
local down_until = 0

local function is_set(n)
	return type(n) == "number" and n == n and n ~= NO_VAL and n ~= INFINITE
end

-- A string field's value; nil when empty or a placeholder Slurm writes for
-- an unset value ("(null)").
local function nonempty(s)
	if type(s) == "string" and s ~= "" and s ~= "(null)" then
		return s
	end
	return nil
end

-- The application tag a free-text name stands for, by the service's rule
-- (validate::tag_from_name in Joulecast): each byte outside the tag's
-- characters becomes "-", leading characters other than a letter or digit
-- are dropped, the rest is cut to 128; "unnamed" when nothing is left. So
-- every job has an application: one whose name is not a tag is predicted
-- (conservatively, until it has history) rather than let through unseen.
local function tag_from_name(name)
	local tag = string.gsub(name or "", "[^A-Za-z0-9._:@+=%-]", "-")
	tag = string.gsub(tag, "^[^A-Za-z0-9]+", "")
	tag = string.sub(tag, 1, 128)
	if tag == "" then
		return "unnamed"
	end
	return tag
end

local function kwh(j)
	if not j then
		return "unknown"
	end
	return string.format("%.3g kWh", j / 3.6e6)
end

local function fmt(n)
	return string.format("%.4g", n)
end

-- One line of printable text (for messages built from answers).
local function printable(s)
	return (string.gsub(s or "", "%c", " "))
end

-- The admission request for a job; nil and why when none can be made.
-- `get(field)` reads a job field (already merged for a modification).
local function admission_request(get)
	local name
	if CONFIG.APP_FROM == "comment" then
		name = nonempty(get("comment"))
	elseif CONFIG.APP_FROM == "wckey" then
		name = nonempty(get("wckey"))
	else
		name = nonempty(get("name"))
	end
	local app = tag_from_name(name)
	local nodes = get("min_nodes")
	if not is_set(nodes) or nodes < 1 then
		nodes = CONFIG.DEFAULT_NODES
	end
	if not nodes then
		return nil, "the job gives no node count"
	end
	local account = nonempty(get("account")) or nonempty(get("default_account"))
	local partition = nonempty(get("partition"))
	if partition and string.find(partition, ",", 1, true) then
		partition = nil -- several candidate partitions: let the service choose
	end
	local limit = get("time_limit") -- minutes
	local time_limit_s = nil
	if is_set(limit) and limit > 0 then
		time_limit_s = limit * 60
	end
	return {
		{ "app", app },
		{ "nodes", nodes },
		{ "partition", partition },
		{ "account", account },
		{ "time_limit_s", time_limit_s },
	}
end

-- Decide on a job: returns {reject = bool, message = ..., comment = ...}.
local function decide(fields)
	local unavailable = function(why)
		if CONFIG.FAIL_OPEN then
			-- Failing open, visibly: the job says it went unchecked.
			return { reject = false, comment = CONFIG.COMMENT_TAG .. "unchecked" }
		end
		return {
			reject = true,
			message = "Joulecast: the job's energy could not be checked (" .. why
				.. "); please try again later or contact the support team.",
		}
	end
	if os.time() < down_until then
		log("debug", "service marked unavailable; not asking")
		return unavailable("service unavailable")
	end
	local body = json_object(fields)
	local status, answer, err = http_post("/v1/admission", body)
	if status == 0 or status >= 500 then
		down_until = os.time() + CONFIG.BACKOFF_S
		log("error", string.format("admission request failed (%s); %s for %ds",
			status == 0 and printable(err) or ("HTTP " .. status),
			CONFIG.FAIL_OPEN and "accepting jobs unchecked" or "rejecting jobs",
			CONFIG.BACKOFF_S))
		return unavailable("service unavailable")
	end
	if status ~= 200 then
		local problem = object_members(answer) or {}
		local detail = printable(decode_string(problem.detail) or "")
		local errors = array_items(problem.errors) or {}
		for _, e in ipairs(errors) do
			local m = object_members(e) or {}
			detail = detail .. "; " .. printable(decode_string(m.field) or "?")
				.. ": " .. printable(decode_string(m.reason) or "?")
		end
		log("info", string.format("admission answered HTTP %d: %s", status, detail))
		return unavailable("HTTP " .. status .. ": " .. detail)
	end

	local top = object_members(answer)
	if not top then
		log("error", "admission answer is not a JSON object")
		return unavailable("unreadable answer")
	end
	local prediction = object_members(top.prediction) or {}
	local energy = object_members(top.energy) or {}
	local ets = decode_number(prediction.ets_j)
	local apc = decode_number(prediction.apc_w)
	local tts = decode_number(prediction.tts_s)

	if CONFIG.ENFORCE_ENERGY_BUDGET and decode_bool(energy.fits) == false then
		local account = decode_string(energy.account) or "?"
		local remaining = decode_number(energy.remaining_j)
		local needed = decode_number(energy.predicted_ets_j)
		local reasons = {}
		for _, r in ipairs(array_items(top.reasons) or {}) do
			local text = decode_string(r)
			if text and #reasons < 3 then
				reasons[#reasons + 1] = printable(text)
			end
		end
		local left
		if remaining and remaining <= 0 then
			left = "nothing left: " .. kwh(remaining)
		else
			left = "remaining " .. kwh(remaining)
		end
		local msg = string.format(
			"Joulecast: account %s does not have enough energy budget left for this job (%s",
			printable(account), left)
		if needed then
			msg = msg .. ", this job needs about " .. kwh(needed)
		end
		msg = msg .. ")."
		if #reasons > 0 then
			msg = msg .. " Why: " .. table.concat(reasons, "; ") .. "."
		end
		msg = msg .. " Submit under another account or contact your project's PI or the support team."
		return { reject = true, message = msg, account = account }
	end

	local comment
	if ets or apc or tts then
		local parts = {}
		if ets then parts[#parts + 1] = "ets_j=" .. fmt(ets) end
		if apc then parts[#parts + 1] = "apc_w=" .. fmt(apc) end
		if tts then parts[#parts + 1] = "tts_s=" .. fmt(tts) end
		comment = CONFIG.COMMENT_TAG .. table.concat(parts, ";")
	else
		comment = CONFIG.COMMENT_TAG .. "no_history"
	end
	return { reject = false, comment = comment }
end

-- Replace an earlier prediction in an admin comment, keep everything else.
local function merge_admin_comment(existing, ours)
	local kept = {}
	for word in string.gmatch(existing or "", "%S+") do
		if string.sub(word, 1, #CONFIG.COMMENT_TAG) ~= CONFIG.COMMENT_TAG then
			kept[#kept + 1] = word
		end
	end
	kept[#kept + 1] = ours
	return table.concat(kept, " ")
end

local function reject_code()
	return slurm[CONFIG.REJECT_ERROR] or ERROR
end

---------------------------------------------------------------------------
-- Slurm entry points
---------------------------------------------------------------------------
local function submit(job_desc)
	local fields, why = admission_request(function(k)
		return job_desc[k]
	end)
	if not fields then
		log("debug", "no prediction: " .. why)
		return SUCCESS
	end
	local d = decide(fields)
	if d.reject then
		log("info", string.format("rejecting a job of uid %s: %s",
			tostring(job_desc.user_id), d.message))
		tell_user(d.message)
		return reject_code()
	end
	if d.comment then
		job_desc.admin_comment = merge_admin_comment(job_desc.admin_comment, d.comment)
	end
	return SUCCESS
end

local APP_FIELD = { jobname = "name", comment = "comment", wckey = "wckey" }
local RECHECK = { APP_FIELD[CONFIG.APP_FROM] or "name", "account", "partition", "min_nodes", "time_limit" }

local function modify(job_desc, job_rec, modify_uid)
	-- Only pending jobs, only when something the prediction depends on
	-- changes, and never for root (an administrator's change stands).
	if modify_uid == 0 or job_rec == nil then
		return SUCCESS
	end
	local state = job_rec.job_state
	if type(state) ~= "number" or state % JOB_STATE_BASE ~= JOB_PENDING then
		return SUCCESS
	end
	local changed = false
	for _, k in ipairs(RECHECK) do
		local v = job_desc[k]
		if (type(v) == "string" and v ~= "") or is_set(v) then
			changed = true
		end
	end
	if not changed then
		return SUCCESS
	end
	local fields, why = admission_request(function(k)
		local v = job_desc[k]
		if (type(v) == "string" and v ~= "") or is_set(v) then
			return v
		end
		return job_rec[k]
	end)
	if not fields then
		log("debug", "no prediction: " .. why)
		return SUCCESS
	end
	local d = decide(fields)
	if d.reject then
		log("info", string.format("rejecting a change to job %s: %s",
			tostring(job_rec.job_id), d.message))
		tell_user(d.message)
		return reject_code()
	end
	-- The AdminComment is not updated here: a user's update request that
	-- carries an admin comment would be refused by slurmctld.
	return SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local ok, rc = pcall(submit, job_desc)
	if ok then
		return rc
	end
	log("error", "internal error: " .. tostring(rc))
	if CONFIG.FAIL_OPEN then
		return SUCCESS
	end
	tell_user("Joulecast: the job's energy could not be checked; please contact the support team.")
	return ERROR
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	local ok, rc = pcall(modify, job_desc, job_rec, modify_uid)
	if ok then
		return rc
	end
	log("error", "internal error: " .. tostring(rc))
	if CONFIG.FAIL_OPEN then
		return SUCCESS
	end
	tell_user("Joulecast: the job's energy could not be checked; please contact the support team.")
	return ERROR
end

-- For the self-test only.
if type(JOULECAST_SELFTEST) == "table" then
	JOULECAST_SELFTEST.CONFIG = CONFIG
	JOULECAST_SELFTEST.json_object = json_object
	JOULECAST_SELFTEST.json_string = json_string
	JOULECAST_SELFTEST.decode_string = decode_string
	JOULECAST_SELFTEST.object_members = object_members
	JOULECAST_SELFTEST.array_items = array_items
	JOULECAST_SELFTEST.merge_admin_comment = merge_admin_comment
	JOULECAST_SELFTEST.reset_backoff = function()
		down_until = 0
	end
end

log("info", "job_submit.lua loaded (service " .. CONFIG.URL .. ")")
