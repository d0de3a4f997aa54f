-- Numbers read from stored data, the first lines of every script that reads one: each goes
-- through checked_number, never through tonumber alone. Lua's tonumber takes what trunner
-- never writes: 'inf', 'nan', '1e300', '0x10', ' 5'; an infinity or a NaN then fails the
-- script later (SET ... PX 1e+300), or makes every comparison false, for ever.
-- checked_number(value, {integer = true|nil, digits = n|nil, min = n|nil, max = n|nil})
-- -> the number, or nil and the reason it is refused ('a string that is not a decimal
-- number', 'a number below 0' ...), to be written into the quarantine record of the value
-- set aside. Only plain decimals are read: digits with an optional '-' and (unless
-- integer) one '.' followed by digits; at most `digits` digits before the point (a bound
-- checked on the text, exact where a double is not: 20 digits are beyond 2^64); the
-- number must be finite and within [min, max].
local function checked_number(value, want)
  if type(value) ~= 'string' then
    return nil, 'not a string'
  end
  if not (string.match(value, '^%-?%d+$')
      or (not want.integer and string.match(value, '^%-?%d+%.%d+$'))) then
    if want.integer then
      return nil, 'a string that is not an integer in decimal digits'
    end
    return nil, 'a string that is not a decimal number'
  end
  if want.digits and #string.match(value, '^%-?(%d+)') > want.digits then
    return nil, 'a number of more than ' .. want.digits .. ' digits'
  end
  local number = tonumber(value)
  if not number or number ~= number or number == math.huge or number == -math.huge then
    return nil, 'a number that is not finite'
  end
  if want.min and number < want.min then
    return nil, 'a number below ' .. tostring(want.min)
  end
  if want.max and number > want.max then
    return nil, 'a number above ' .. tostring(want.max)
  end
  return number
end
