// A job's metric points: all of them once, then the newest as they arrive.
import { get } from "./api.js";

const POLL_MS = 1000;
const RECENT = 500;

export async function allPoints(jobId) {
  return (await get(`/v2/jobs/${jobId}/metrics`)).metrics;
}

// Calls onPoints(points) with every point, then with the whole list again whenever new
// ones arrive, until stop() or `isActive()` turns false.
export function watchPoints(jobId, onPoints, isActive) {
  let points = [];
  const newest = new Map(); // learner -> time of its newest point
  let timer = null;
  let stopped = false;
  const remember = (list) => {
    for (const point of list) {
      if ((newest.get(point.learner) ?? -Infinity) < point.time) newest.set(point.learner, point.time);
    }
  };
  const poll = async () => {
    if (stopped) return;
    try {
      const recent = (await get(`/v2/jobs/${jobId}/metrics`, { last: RECENT })).metrics;
      const fresh = recent.filter((p) => p.time > (newest.get(p.learner) ?? -Infinity));
      const gap = fresh.length && recent.every((p) => p.time > (newest.get(p.learner) ?? -Infinity)) &&
        newest.size > 0 && recent.length >= RECENT;
      if (gap) {
        points = await allPoints(jobId); // more arrived than one poll reads: read them all
        remember(points);
        onPoints(points);
      } else if (fresh.length) {
        points = points.concat(fresh);
        remember(fresh);
        onPoints(points);
      }
    } catch {
      // the next poll tries again; the page shows the API's state elsewhere
    }
    if (!stopped && isActive()) timer = setTimeout(poll, POLL_MS);
  };
  (async () => {
    points = await allPoints(jobId);
    remember(points);
    onPoints(points);
    if (isActive()) timer = setTimeout(poll, POLL_MS);
  })();
  return () => { stopped = true; clearTimeout(timer); };
}
