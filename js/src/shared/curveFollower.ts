/**
 * The one live data path of every loss curve (the lab's job tab and the notebook widgets; `%train` draws the same
 * server curves in Python): the server's downsampled curve (`GET .../metrics`, MinMaxLTTB to at most
 * `maxPoints`), then only what comes after its last step (`after_step`), appended. When the appended points have
 * doubled the curve, the whole curve is fetched again, downsampled anew, so a 100,000-step job is drawn whole,
 * from its first step, with a bounded number of points.
 */
import { ICurves, ILossPoint, mergeSeries } from './model';

/** The series a curve draws. */
export interface ICurveSeries {
  loss: ILossPoint[];
  validation: ILossPoint[];
  /** Steps reported in all (the server's count). */
  count: number;
}

/** The series of one answer of `GET .../metrics`. */
export function seriesOf(curves: ICurves): ICurveSeries {
  const loss = curves.step.map((step, i) => ({ step, loss: curves.loss[i] })).filter(p => Number.isFinite(p.loss));
  const validation = curves.validation
    .filter(v => typeof v.step === 'number' && typeof v.eval_loss === 'number')
    .map(v => ({ step: v.step as number, loss: v.eval_loss as number }));
  return { loss, validation, count: curves.count };
}

export class CurveFollower {
  /**
   * @param fetch - one request: `afterStep` null for the whole curve
   * @param maxPoints - the most points the server sends for the whole curve
   */
  constructor(
    private readonly _fetch: (maxPoints: number, afterStep: number | null) => Promise<ICurves>,
    readonly maxPoints = 2000
  ) {}

  /** What is drawn now. */
  get series(): ICurveSeries {
    return this._series;
  }

  /** Fetch what is new; resolves with whether the series changed. */
  async update(): Promise<boolean> {
    const whole = this._lastStep === null || this._series.loss.length > 2 * this.maxPoints;
    const answer = await this._fetch(this.maxPoints, whole ? null : this._lastStep);
    const part = seriesOf(answer);
    const before = this._series;
    if (whole || answer.after_step === null || answer.after_step === undefined) {
      this._series = part;
    } else {
      this._series = {
        loss: mergeSeries(before.loss, part.loss),
        validation: mergeSeries(before.validation, part.validation),
        count: part.count
      };
    }
    this._lastStep = answer.last_step ?? this._lastStep;
    return (
      this._series.loss.length !== before.loss.length ||
      this._series.validation.length !== before.validation.length ||
      this._series.count !== before.count
    );
  }

  /** Forget what was drawn (the next update fetches the whole curve). */
  reset(): void {
    this._series = { loss: [], validation: [], count: 0 };
    this._lastStep = null;
  }

  private _series: ICurveSeries = { loss: [], validation: [], count: 0 };
  private _lastStep: number | null = null;
}
