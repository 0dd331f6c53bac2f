-- Argo CD health check for OffsetCheckpoint (mirrorflow.io/v1alpha1). See docs/GITOPS.md.
-- Stalled (a failing runner, a stale group, a missing flow) is Degraded, Reconciling (no
-- worker has reported yet) Progressing, Ready True Healthy. Without those conditions (an
-- older controller), Ready's reason decides.
local hs = {}

local function condition(conditions, type_)
  for _, c in ipairs(conditions or {}) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

local function said(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to report a status"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. generation
  return hs
end

local stalled = condition(status.conditions, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled)
  return hs
end
local reconciling = condition(status.conditions, "Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = said(reconciling)
  return hs
end
local ready = condition(status.conditions, "Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end
local stale = condition(status.conditions, "Stale")
if ready.status == "True" then
  if stale ~= nil and stale.status == "True" then
    hs.status = "Degraded"
    hs.message = said(stale)
  else
    hs.status = "Healthy"
    hs.message = said(ready)
  end
  return hs
end
-- Ready False without Stalled or Reconciling: a controller that predates them.
if ready.reason == "AwaitingCheckpoints" then
  hs.status = "Progressing"
else
  hs.status = "Degraded"
end
hs.message = said(ready)
return hs
