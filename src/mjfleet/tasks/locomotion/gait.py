"""What mjlab 1.6's velocity terms read of a described robot, as MuJoCo sensors added to its model.

Per foot: a contact sensor against the floor (found, net force; the foot's collision geom, or the subtree of its
body where it has several) and the linear velocity of its frame (site, or body) in the world; for the robot: its
self-contacts (the base body's subtree against itself, found and force of the first contact) and the angular
momentum of the whole body about its centre of mass. The found flags and forces are recorded after every physics
substep (`Simulation(sensor_history=...)`): air and contact times advance per substep, as mjlab's contact sensors
do, and a self-contact counts in every substep it lasts.
"""

from __future__ import annotations

import mujoco
import torch

from mjfleet.robots import BuiltRobot

FOUND_AND_FORCE = (1 << int(mujoco.mjtConDataField.mjCONDATA_FOUND)) | (
    1 << int(mujoco.mjtConDataField.mjCONDATA_FORCE)
)
NETFORCE = 3  # mjtConReduce: none 0, mindist 1, maxforce 2, netforce 3 (MuJoCo 4.0's <contact reduce=...>)
FIRST_CONTACT_TOLERANCE_S = 1e-6


def foot_sensor_names(built: BuiltRobot) -> list[str]:
    return [f"mjfleet_foot{i}_floor" for i in range(len(built.foot_geom_ids))]


def add_gait_sensors(spec: mujoco.MjSpec, built: BuiltRobot) -> None:
    """Add the sensors this module reads to `spec` (the robot's, before it is compiled)."""
    m = built.model
    obj = mujoco.mjtObj
    for name, geoms, body in zip(
        foot_sensor_names(built), built.foot_geom_ids, built.foot_body_ids, strict=True
    ):
        geom_name = m.geom(geoms[0]).name
        if len(geoms) == 1 and geom_name:
            primary = {"objtype": obj.mjOBJ_GEOM, "objname": geom_name}
        else:
            primary = {"objtype": obj.mjOBJ_XBODY, "objname": m.body(body).name}  # the subtree
        sensor = spec.add_sensor(
            name=name,
            type=mujoco.mjtSensor.mjSENS_CONTACT,
            reftype=obj.mjOBJ_BODY,
            refname="world",
            **primary,
        )
        sensor.intprm[:3] = [FOUND_AND_FORCE, NETFORCE, 1]
    for i, frame in enumerate(_foot_frames(built)):
        spec.add_sensor(name=f"mjfleet_foot{i}_linvel", type=mujoco.mjtSensor.mjSENS_FRAMELINVEL, **frame)
    base = m.body(built.base_body_id).name
    self_contact = spec.add_sensor(
        name="mjfleet_self_contact",
        type=mujoco.mjtSensor.mjSENS_CONTACT,
        objtype=obj.mjOBJ_XBODY,
        objname=base,
        reftype=obj.mjOBJ_XBODY,
        refname=base,
    )
    self_contact.intprm[:3] = [FOUND_AND_FORCE, 0, 1]
    spec.add_sensor(
        name="mjfleet_angular_momentum",
        type=mujoco.mjtSensor.mjSENS_SUBTREEANGMOM,
        objtype=obj.mjOBJ_BODY,
        objname=base,
    )


def _foot_frames(built: BuiltRobot) -> list[dict]:
    m, obj = built.model, mujoco.mjtObj
    if built.foot_kind == "site":
        return [{"objtype": obj.mjOBJ_SITE, "objname": m.site(i).name} for i in built.foot_ids]
    return [{"objtype": obj.mjOBJ_XBODY, "objname": m.body(b).name} for b in built.foot_body_ids]


def history_columns(m: mujoco.MjModel, built: BuiltRobot) -> list[int]:
    """The sensordata columns recorded after every substep: each foot's found flag, then the self-contact's found
    flag and force."""
    feet = [int(m.sensor(name).adr[0]) for name in foot_sensor_names(built)]
    self_adr = int(m.sensor("mjfleet_self_contact").adr[0])
    return feet + [self_adr, self_adr + 1, self_adr + 2, self_adr + 3]


class GaitState:
    """The feet's and the body's state that the gait terms read, updated once per policy step from the sensors
    (and their per-substep history), reset per environment with its episode."""

    def __init__(self, env) -> None:
        m, n, dev, built = env.mj_model, env.num_envs, env.device, env.built
        self.physics_dt, self.step_dt = env.physics_dt, env.step_dt
        feet = foot_sensor_names(built)
        contact_adr = [int(m.sensor(name).adr[0]) for name in feet]
        self._found = torch.tensor(contact_adr, device=dev)
        self._force = torch.tensor([[a + 1, a + 2, a + 3] for a in contact_adr], device=dev)
        linvel = [int(m.sensor(f"mjfleet_foot{i}_linvel").adr[0]) for i in range(len(feet))]
        self._linvel = torch.tensor([[a, a + 1, a + 2] for a in linvel], device=dev)
        self._angmom = int(m.sensor("mjfleet_angular_momentum").adr[0])
        if built.foot_kind == "site":
            self._site_ids = torch.tensor(built.foot_ids, device=dev)
            self._body_ids = None
        else:
            self._site_ids = None
            self._body_ids = torch.tensor(built.foot_body_ids, device=dev)
        nf = len(feet)
        self._nf = nf  # the history's columns: `history_columns`
        zeros = torch.zeros(n, nf, device=dev)
        self.current_air_time, self.last_air_time = zeros.clone(), zeros.clone()
        self.current_contact_time, self.last_contact_time = zeros.clone(), zeros.clone()
        self.in_contact = torch.zeros(n, nf, dtype=torch.bool, device=dev)
        """Each foot touches the floor (after the last substep)."""
        self.force = torch.zeros(n, nf, 3, device=dev)
        """Each foot's net contact force with the floor (N, world frame)."""
        self.vel_w = torch.zeros(n, nf, 3, device=dev)
        """Each foot frame's linear velocity (m/s, world frame)."""
        self.pos_w = torch.zeros(n, nf, 3, device=dev)
        """Each foot frame's position (m, world frame)."""
        self.self_contact_force = torch.zeros(n, env.sim.substeps, device=dev)
        """The first self-contact's force magnitude (N) after each substep of the last step (0: none)."""
        self.angular_momentum = torch.zeros(n, 3, device=dev)
        """The whole body's angular momentum about its centre of mass (kg m^2/s, world frame)."""

    def update(self, env) -> None:
        """Read this step's sensors; advance air and contact times over each substep (as mjlab 1.6's contact
        sensors do: a foot that touched down within the step has contact time in (0, step])."""
        sim = env.sim
        history = sim.sensor_history
        found = history[:, :, : self._nf] > 0  # (n, substeps, feet)
        dt = self.physics_dt
        for substep in range(found.shape[1]):
            contact = found[:, substep]
            first_contact = (self.current_air_time > 0) & contact
            first_detached = (self.current_contact_time > 0) & ~contact
            self.last_air_time.copy_(
                torch.where(first_contact, self.current_air_time + dt, self.last_air_time)
            )
            self.current_air_time.copy_(torch.where(contact, 0.0, self.current_air_time + dt))
            self.last_contact_time.copy_(
                torch.where(first_detached, self.current_contact_time + dt, self.last_contact_time)
            )
            self.current_contact_time.copy_(torch.where(contact, self.current_contact_time + dt, 0.0))
        data = sim.sensordata
        self.in_contact.copy_(data[:, self._found] > 0)
        self.force.copy_(data[:, self._force])
        self.vel_w.copy_(data[:, self._linvel])
        if self._site_ids is not None:
            self.pos_w.copy_(sim.data_view("site_xpos")[:, self._site_ids])
        else:
            self.pos_w.copy_(sim.xpos[:, self._body_ids])
        self.self_contact_force.copy_(history[:, :, self._nf + 1 : self._nf + 4].norm(dim=-1))
        self.angular_momentum.copy_(data[:, self._angmom : self._angmom + 3])

    def first_contact(self) -> torch.Tensor:
        """(n, feet): the feet that touched down within the last policy step and still touch."""
        t = self.current_contact_time
        return (t > 0) & (t < self.step_dt + FIRST_CONTACT_TOLERANCE_S)

    def reset(self, mask: torch.Tensor) -> None:
        m = mask.unsqueeze(1)
        for buf in (
            self.current_air_time,
            self.last_air_time,
            self.current_contact_time,
            self.last_contact_time,
        ):
            buf.masked_fill_(m, 0.0)
        self.in_contact.masked_fill_(m, False)
